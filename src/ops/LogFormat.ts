/**
 * How a bothy process writes its logs to standard output: one JSON object per line when stdout is
 * not a terminal (a log collector reads it; `message`, `level`, `timestamp`, `annotations` such as
 * `consumer`, and `cause` when there is one), the readable `[time] LEVEL (#fiber): message` lines
 * when it is. The level is `--log-level` or `BOTHY_LOG_LEVEL` (see `bin/bothy.ts`). Nothing logged
 * holds a secret: secrets are `Redacted`, which renders as `<redacted>` in both forms.
 */
import { Layer, Logger } from "effect"

/** JSON lines unless `terminal` (by default: whether standard output is one). */
export const layer = (terminal: boolean = process.stdout.isTTY === true) =>
  terminal ? Layer.empty : Logger.layer([Logger.consoleJson])

/**
 * The same lines on standard error instead, for commands whose standard output is their answer
 * (`bothy subscriptions ... --json`), so a script reads only the answer there.
 */
export const layerStderr = (terminal: boolean = process.stdout.isTTY === true) =>
  terminal ? Layer.succeed(Logger.LogToStderr, true) : Logger.layer([Logger.withConsoleError(Logger.formatJson)])

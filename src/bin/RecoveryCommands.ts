/**
 * `bothy deliveries recover-bulk` and `bothy deliveries recovery`: bulk recovery from the command
 * line. The recovery itself is a job a worker runs (`BulkRecovery`); the command asks for it and
 * then watches it, with a progress bar on a terminal and a plain line per change otherwise.
 *
 * What it keeps true: Ctrl-C while watching pauses the recovery (its job ends after the batch in
 * hand, the cursor kept) and says how to go on: `bothy deliveries recovery <job> --resume`, which
 * runs it again from where it stopped. Nothing is sent twice by a pause and a resume.
 */
import { Console, Effect, Option, Redacted, Schema } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { RecoveryAccepted, Recovery as RecoveryJson } from "../admin/RecoveriesApi.ts"
import * as BulkRecovery from "../webhooks/subscriptions/BulkRecovery.ts"
import { json, print, withWebhooks } from "./AdminCommandRuntime.ts"

const clearLine = "\r\x1b[2K"

/** `[#####-----]  50% 250/500 examined, 240 resent, 10 skipped (running)`: the bar is `width` wide. */
export const progressLine = (r: BulkRecovery.Recovery, width = 30) => {
  const total = Math.max(r.total, r.examined)
  const share = r.state === "done" ? 1 : total === 0 ? 0 : r.examined / total
  const filled = Math.round(share * width)
  const percent = `${Math.floor(share * 100)}%`.padStart(4)
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${percent} ${r.examined}/${total} examined, ${r.resent} ${r.replayTo === null ? "resent" : "copied"}, ${r.skipped} skipped (${r.state})`
}

const resumeHint = (job: bigint) => `resume it with: bothy deliveries recovery ${job} --resume`

/**
 * Polls the recovery until it is done or paused, drawing its progress. Ctrl-C pauses it (the
 * interruption runs `pause` before the command ends).
 */
const watch = (job: bigint) =>
  Effect.gen(function* () {
    const tty = process.stdout.isTTY === true
    let last = ""
    for (;;) {
      const r = yield* BulkRecovery.get(job)
      const line = progressLine(r)
      if (line !== last) {
        if (tty) process.stdout.write(`${clearLine}${line}`)
        else yield* Console.log(line)
        last = line
      }
      if (r.state !== "running") {
        if (tty) process.stdout.write("\n")
        if (r.state === "paused") yield* Console.log(`recovery ${job} is paused; ${resumeHint(job)}`)
        return r
      }
      yield* Effect.sleep("250 millis")
    }
  }).pipe(
    Effect.onInterrupt(() =>
      BulkRecovery.pause(job).pipe(
        Effect.andThen(Console.error(`\nrecovery ${job} paused after the batch in hand; ${resumeHint(job)}`)),
        Effect.ignore,
      ),
    ),
  )

const many = (name: string, description: string) =>
  Flag.String(name).pipe(Flag.withDescription(description), Flag.atLeast(0))

const recoverBulk = Command.make(
  "recover-bulk",
  {
    owner: Flag.String("owner").pipe(Flag.withDescription("deliveries of this owner's subscriptions"), Flag.optional),
    subscription: many("subscription", "a subscription's id (repeat it)"),
    eventType: many("event-type", "an event type or pattern such as order.* (repeat it)"),
    state: many("state", "failed (default), dead, delivered; pending for a replay (repeat it)"),
    since: Flag.Date("since").pipe(Flag.withDescription("deliveries created at or after this time"), Flag.optional),
    until: Flag.Date("until").pipe(Flag.withDescription("deliveries created before this time"), Flag.optional),
    all: Flag.Boolean("all").pipe(
      Flag.withDescription("with no other selector: every delivery of every subscription"),
      Flag.withDefault(false),
    ),
    replayTo: Flag.String("replay-to").pipe(
      Flag.withDescription("copy the one --subscription's range to a new subscription at this URL"),
      Flag.optional,
    ),
    batchSize: Flag.Int("batch-size").pipe(
      Flag.withDescription(`deliveries per transaction (default ${BulkRecovery.defaultBatchSize})`),
      Flag.optional,
    ),
    detach: Flag.Boolean("detach").pipe(
      Flag.withDescription("print the job's id and return without watching"),
      Flag.withDefault(false),
    ),
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const replayTo = Option.getOrUndefined(flags.replayTo)
      const requested = yield* BulkRecovery.request(
        {
          owner: Option.getOrUndefined(flags.owner),
          subscriptions: flags.subscription,
          eventTypes: flags.eventType,
          states: flags.state.length === 0 ? undefined : flags.state,
          since: Option.getOrUndefined(flags.since),
          until: Option.getOrUndefined(flags.until),
          all: flags.all,
        },
        {
          replayTo: replayTo === undefined ? undefined : { url: replayTo },
          batchSize: Option.getOrUndefined(flags.batchSize),
        },
      )
      const replay =
        requested.replay === undefined
          ? null
          : { subscription: requested.replay.subscription, secret: Redacted.value(requested.replay.secret) }
      yield* print(RecoveryAccepted, { job: requested.job, total: requested.total, replay }, flags.json, () =>
        [
          `recovery ${requested.job} (job ${BulkRecovery.kind}) selects ${requested.total} deliveries; a worker runs it`,
          ...(replay === null
            ? []
            : [`new subscription ${replay.subscription}, signing secret (shown once): ${replay.secret}`]),
        ].join("\n"),
      )
      if (!flags.detach && !flags.json) yield* watch(requested.job)
    }).pipe(withWebhooks),
).pipe(
  Command.withDescription(
    "Re-send the deliveries a filter selects across subscriptions, or replay one subscription's range to a new URL (a job the worker runs; Ctrl-C pauses it)",
  ),
)

const recovery = Command.make(
  "recovery",
  {
    job: Argument.String("job").pipe(
      Argument.withDescription("the recovery's job id"),
      Argument.withSchema(Schema.BigIntFromString),
    ),
    pause: Flag.Boolean("pause").pipe(
      Flag.withDescription("pause it after the batch in hand"),
      Flag.withDefault(false),
    ),
    resume: Flag.Boolean("resume").pipe(
      Flag.withDescription("go on from where it stopped, and watch it"),
      Flag.withDefault(false),
    ),
    watch: Flag.Boolean("watch").pipe(
      Flag.withDescription("watch it until it is done or paused"),
      Flag.withDefault(false),
    ),
    json,
  },
  (flags) =>
    Effect.gen(function* () {
      const r = flags.pause
        ? yield* BulkRecovery.pause(flags.job)
        : flags.resume
          ? yield* BulkRecovery.resume(flags.job)
          : yield* BulkRecovery.get(flags.job)
      if ((flags.resume || flags.watch) && !flags.json && r.state === "running") {
        yield* watch(r.job)
        return
      }
      yield* print(RecoveryJson, r, flags.json, () => `recovery ${r.job}: ${progressLine(r)}`)
    }).pipe(withWebhooks),
).pipe(Command.withDescription("Show a bulk recovery's progress; pause or resume it"))

export const recoveryCommands = [recoverBulk, recovery] as const

/**
 * The flags of `npm run chaos`: `--events N` (default 10000), `--kills N` (SIGKILLs of workers,
 * default 4; the other faults scale with it), `--seed N` (default: from the clock, printed),
 * `--rate N` (events a second, default 150), `--duration D` (a soak: produce for D, e.g. `1h`,
 * `20m`, `90s`), `--output FILE` (default `bench/results/chaos.json`). A bad value stops the run
 * with one line naming the flag.
 */
import { Schema } from "effect"

export class InvalidFlag extends Schema.TaggedError<InvalidFlag>()("InvalidFlag", {
  flag: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `chaos: --${this.flag}: ${this.detail}`
  }
}

export interface Flags {
  readonly events: number
  readonly kills: number
  readonly seed: number
  readonly rate: number
  readonly durationMillis: number | undefined
  readonly output: string
}

const units: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000 }

const count = (flag: string, raw: string, min: number) => {
  const n = Number(raw)
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min)
    throw new InvalidFlag({ flag, detail: `expected a whole number of at least ${min}, got ${JSON.stringify(raw)}` })
  return n
}

export const parse = (argv: ReadonlyArray<string>, now: number): Flags => {
  const given = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    const m = /^--([a-z]+)(?:=(.*))?$/.exec(arg)
    if (m === null)
      throw new InvalidFlag({
        flag: arg,
        detail: "not a flag (flags: --events --kills --seed --rate --duration --output)",
      })
    const name = m[1]!
    if (!["events", "kills", "seed", "rate", "duration", "output"].includes(name))
      throw new InvalidFlag({
        flag: name,
        detail: "unknown (flags: --events --kills --seed --rate --duration --output)",
      })
    const value = m[2] ?? argv[++i]
    if (value === undefined) throw new InvalidFlag({ flag: name, detail: "needs a value" })
    given.set(name, value)
  }
  const duration = given.get("duration")
  let durationMillis: number | undefined
  if (duration !== undefined) {
    const d = /^(\d+)([smh])$/.exec(duration)
    if (d === null || Number(d[1]) === 0)
      throw new InvalidFlag({
        flag: "duration",
        detail: `expected a length such as 90s, 20m or 1h, got ${JSON.stringify(duration)}`,
      })
    durationMillis = Number(d[1]) * units[d[2]!]!
  }
  const rate = count("rate", given.get("rate") ?? "150", 1)
  return {
    events: count(
      "events",
      given.get("events") ?? (durationMillis === undefined ? "10000" : String(Number.MAX_SAFE_INTEGER)),
      1,
    ),
    kills: count("kills", given.get("kills") ?? "4", 0),
    seed: count("seed", given.get("seed") ?? String(now % 1_000_000), 0),
    rate,
    durationMillis,
    output: given.get("output") ?? "bench/results/chaos.json",
  }
}

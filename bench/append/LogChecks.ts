/**
 * After each run of a gapless implementation the log must hold seqs exactly 1..N, N being every
 * event a producer saw committed; a run that breaks it has no figure.
 */
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

/** A run left the log in a state its implementation promises it cannot; its figure is void. */
export class LogCheckFailed extends Schema.TaggedError<LogCheckFailed>()("LogCheckFailed", {
  implementation: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `after a run of ${this.implementation}, event_log does not hold what the producers saw committed: ${this.detail}`
  }
}

/** Seqs are exactly 1..N, the counter says N, and N is every event a producer saw committed. */
export const verifyGapless = (implementation: string, acknowledged: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ rows: bigint; seqs: bigint; first: bigint | null; last: bigint | null; head: bigint }>`
      SELECT count(*) AS rows, count(DISTINCT seq) AS seqs, min(seq) AS first, max(seq) AS last,
             (SELECT value FROM event_seq) AS head
      FROM event_log`
    const ok =
      row !== undefined &&
      row.rows === BigInt(acknowledged) &&
      row.seqs === row.rows &&
      row.first === 1n &&
      row.last === row.rows &&
      row.head === row.rows
    if (!ok) {
      return yield* new LogCheckFailed({
        implementation,
        detail: `expected seqs 1..${acknowledged}, found ${JSON.stringify(row, (_, v) => (typeof v === "bigint" ? String(v) : v))}`,
      })
    }
    return true
  })

/** Baseline (b) has no gapless seqs to check, but every acknowledged event must be there. */
export const verifyCount = (implementation: string, acknowledged: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ rows: bigint }>`SELECT count(*) AS rows FROM event_log`
    if (row?.rows !== BigInt(acknowledged)) {
      return yield* new LogCheckFailed({
        implementation,
        detail: `acknowledged ${acknowledged} events, found ${String(row?.rows)} rows`,
      })
    }
    return true
  })

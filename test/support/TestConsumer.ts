/**
 * Shared pieces for consumer tests: registering a consumer name (what a migration does for a real
 * one), a deterministic fan-out (in TypeScript, and the same in SQL for the one-statement round),
 * and the exactly-once check.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { FanOutJob } from "../../src/consumer/ConsumerRound.ts"
import type { Event } from "../../src/log/Event.ts"
import * as RowLock from "./RowLock.ts"

/** Adds a cursor row for `name` at the current head, as a consumer's migration would. */
export const register = (name: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`INSERT INTO event_consumer_cursors (name, last_seq) SELECT ${name}, value FROM event_seq`,
  )

/** Every event goes to `receivers` receivers: r0, r1, ... */
export const fanOutJobs = (events: ReadonlyArray<Event>, receivers: number): ReadonlyArray<FanOutJob> =>
  events.flatMap((e) =>
    Array.from({ length: receivers }, (_, r) => ({
      seq: e.seq,
      receiver: `r${r}`,
      kind: "test.deliver",
      args: { seq: e.seq.toString(), receiver: `r${r}` },
    })),
  )

/** `fanOutJobs` as the `wanted` CTE of a `StatementRound.StatementFanOut`: the same jobs, from `ev`. */
export const wantedCte = (sql: SqlClient.SqlClient, receivers: number) => sql`
  wanted AS (
    SELECT e.seq, 'r' || r.i AS receiver, 'test.deliver'::text AS kind, NULL::text AS queue,
           jsonb_build_object('seq', e.seq::text, 'receiver', 'r' || r.i) AS args, NULL::int AS max_attempts
    FROM ev AS e CROSS JOIN generate_series(0, ${receivers - 1}::int) AS r(i)
  )`

/**
 * Locks `name`'s cursor row in a transaction of another pooled connection (as another worker's round
 * would) and returns once it is held; `release` ends that transaction.
 */
export const holdCursor = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    RowLock.hold(sql`SELECT 1 FROM event_consumer_cursors WHERE name = ${name} FOR UPDATE`),
  )

export const cursor = (name: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ lastSeq: bigint }>`SELECT last_seq AS "lastSeq" FROM event_consumer_cursors WHERE name = ${name}`,
  ).pipe(Effect.map((rows) => rows[0]!.lastSeq))

/**
 * Exactly one job per (event, receiver) for seqs in (after, upTo], none outside: counted from the
 * job args, independent of the unique key that would hide a duplicate.
 */
export const assertExactlyOnce = (name: string, after: bigint, upTo: bigint, receivers: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ seq: string; receiver: string; n: number }>`
      SELECT args->>'seq' AS seq, args->>'receiver' AS receiver, count(*)::int AS n
      FROM jobs WHERE unique_key LIKE ${`${name}:%`}
      GROUP BY 1, 2 ORDER BY (args->>'seq')::bigint, 2`
    const expected: Array<string> = []
    for (let seq = after + 1n; seq <= upTo; seq++) {
      for (let r = 0; r < receivers; r++) expected.push(`${seq}/r${r}`)
    }
    const duplicated = rows.filter((r) => r.n !== 1)
    assert.deepStrictEqual(duplicated, [], "no (event, receiver) pair has more than one job")
    assert.deepStrictEqual(
      rows.map((r) => `${r.seq}/${r.receiver}`).sort(),
      expected.sort(),
      "every (event, receiver) pair has its job, and nothing else",
    )
  })

/**
 * What a consumer round and `Jobs.insert` are measured against, written the way an application
 * would write the same SQL work with the plain `pg` driver on one `pg.Client`:
 *
 *   raw round: BEGIN; SELECT the next batch (seq > $1 ORDER BY seq LIMIT $2); one
 *              INSERT INTO jobs … SELECT FROM unnest($1::text[], …) for every (event, receiver);
 *              UPDATE the cursor; COMMIT. Repeated until a read comes back empty.
 *   raw insert: one autocommitted INSERT … SELECT FROM unnest(…) of a batch of job rows.
 *
 * Both write exactly the rows ours writes (kind, args, unique key, trace parent; the column
 * defaults give the same queue, priority, attempts, schedule and state ours sets), but skip what
 * only ours does: the cursor lock, the head read, validation, `ON CONFLICT DO NOTHING` and the
 * `pg_notify('jobs', …)` wake-up. So a ratio ours / raw is what those guarantees and the Effect
 * client cost together. Named prepared statements, as a tuned application would use.
 *
 * More inserts split the gap between `Jobs.insert` and the raw insert into its causes, each
 * step adding one thing: `rawUnindexed` is the raw insert into a copy of `jobs` without indexes
 * (what the table's three indexes cost); `rawOnConflict` is the raw insert plus
 * `ON CONFLICT DO NOTHING`;
 * `oursStatement` runs `Jobs.insert`'s own statement (a typed array per column through
 * `unnest`, RETURNING, NOTIFY) on the same driver, so ours / oursStatement is the
 * client's share (validation, JSON, Effect) and oursStatement / raw the statement's.
 */
import { Effect, Schema, type Scope } from "effect"
import { Client, type ClientConfig } from "pg"
import type { Tally } from "../harness/Throughput.ts"

export class BaselineFailed extends Schema.TaggedError<BaselineFailed>()("BaselineFailed", {
  baseline: Schema.String,
  cause: Schema.Defect(),
}) {
  override get message() {
    return `baseline ${this.baseline} failed: ${String(this.cause)}`
  }
}

/** A job as both sides fill it; every other column is the default, equal to what ours sets. */
export interface JobRow {
  readonly kind: string
  readonly args: { readonly [key: string]: string }
  readonly uniqueKey: string
  readonly traceParent: string | null
}

/** Opens a client; the scope closes it. */
export const connect = (config: ClientConfig) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const client = new Client(config)
        await client.connect()
        return client
      },
      catch: (cause) => new BaselineFailed({ baseline: "connect", cause }),
    }),
    (client) => Effect.promise(() => client.end()),
  ) satisfies Effect.Effect<Client, BaselineFailed, Scope.Scope>

const insertUnnest = {
  name: "raw-jobs-insert",
  text: `INSERT INTO jobs (kind, args, unique_key, trace_parent)
         SELECT * FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[])`,
}

/** One array per column, as `unnest` takes them. */
const insertValues = (jobs: ReadonlyArray<JobRow>) => {
  const kinds: Array<string> = []
  const args: Array<string> = []
  const uniqueKeys: Array<string> = []
  const traceParents: Array<string | null> = []
  for (const job of jobs) {
    kinds.push(job.kind)
    args.push(JSON.stringify(job.args))
    uniqueKeys.push(job.uniqueKey)
    traceParents.push(job.traceParent)
  }
  return [kinds, args, uniqueKeys, traceParents]
}

/** What a drain did; `rounds` counts committed transactions. */
export interface Drained {
  readonly events: number
  readonly jobs: number
  readonly rounds: number
  /** Total ms per phase over the committed rounds (the last, empty read is not in them). */
  readonly phasesMs: Readonly<Record<string, number>>
}

export const rawPhaseNames = ["begin", "read", "fanOut", "insert", "cursorUpdate", "commit"] as const

/**
 * Drains `consumer` from `afterSeq` to the end of the log in raw rounds of `batchSize` events,
 * `fanOut` giving the jobs for a batch's seqs and trace parents.
 */
export const drain = (
  client: Client,
  consumer: string,
  afterSeq: bigint,
  batchSize: number,
  fanOut: (
    events: ReadonlyArray<{ readonly seq: string; readonly traceParent: string | null }>,
  ) => ReadonlyArray<JobRow>,
) =>
  Effect.tryPromise({
    try: async (): Promise<Drained> => {
      let last = afterSeq.toString()
      let events = 0
      let jobs = 0
      let rounds = 0
      const phasesMs = Object.fromEntries(rawPhaseNames.map((p) => [p, 0])) as Record<
        (typeof rawPhaseNames)[number],
        number
      >
      for (;;) {
        const t0 = performance.now()
        await client.query("BEGIN")
        const t1 = performance.now()
        const read = await client.query<{ seq: string; trace_parent: string | null }>({
          name: "raw-read",
          text: `SELECT seq, epoch, occurred_at, space_id, type, actor, payload, trace_parent
                 FROM event_log WHERE seq > $1 ORDER BY seq LIMIT $2`,
          values: [last, batchSize],
        })
        const t2 = performance.now()
        if (read.rows.length === 0) {
          await client.query("ROLLBACK")
          return { events, jobs, rounds, phasesMs }
        }
        const wanted = fanOut(read.rows.map((r) => ({ seq: r.seq, traceParent: r.trace_parent })))
        const values = insertValues(wanted)
        const t3 = performance.now()
        await client.query({ ...insertUnnest, values })
        const t4 = performance.now()
        last = read.rows.at(-1)!.seq
        await client.query({
          name: "raw-cursor",
          text: "UPDATE event_consumer_cursors SET last_seq = $1, updated_at = clock_timestamp() WHERE name = $2",
          values: [last, consumer],
        })
        const t5 = performance.now()
        await client.query("COMMIT")
        const t6 = performance.now()
        phasesMs.begin += t1 - t0
        phasesMs.read += t2 - t1
        phasesMs.fanOut += t3 - t2
        phasesMs.insert += t4 - t3
        phasesMs.cursorUpdate += t5 - t4
        phasesMs.commit += t6 - t5
        events += read.rows.length
        jobs += wanted.length
        rounds++
      }
    },
    catch: (cause) => new BaselineFailed({ baseline: "raw round", cause }),
  })

export type InsertBaseline = "raw" | "rawUnindexed" | "rawOnConflict" | "oursStatement"

/** A copy of `jobs`' columns and defaults without its indexes and checks, for `rawUnindexed`. */
export const unindexedTable = "bench_jobs_unindexed"
export const createUnindexedTable = `CREATE TABLE IF NOT EXISTS ${unindexedTable} (LIKE jobs INCLUDING DEFAULTS INCLUDING IDENTITY)`

const statements: Readonly<Record<Exclude<InsertBaseline, "oursStatement">, { name: string; text: string }>> = {
  raw: insertUnnest,
  // The same insert where the table has no indexes: what the rows cost without jobs' three indexes.
  rawUnindexed: {
    name: "raw-unindexed-insert",
    text: insertUnnest.text.replace("INSERT INTO jobs", `INSERT INTO ${unindexedTable}`),
  },
  // The raw insert plus the one clause ours needs for exactly-once: prices the speculative insert.
  rawOnConflict: {
    name: "raw-jobs-insert-on-conflict",
    text: `${insertUnnest.text} ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING`,
  },
}

// `Jobs.insert`'s statement as it stands in src/jobs/Jobs.ts, fed the same column arrays it builds
// (columns no row sets go as empty arrays and take their defaults).
const oursStatementText = `
  WITH ins AS (
    INSERT INTO jobs (kind, queue, args, priority, max_attempts, scheduled_at, state, unique_key, trace_parent)
    SELECT k, coalesce(q, 'default'), a::jsonb, coalesce(p, 1), coalesce(m, 25), coalesce(s, clock_timestamp()),
           CASE WHEN s > clock_timestamp() THEN 'scheduled' ELSE 'available' END::job_state, u, t
    FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int2[], $6::timestamptz[], $7::text[], $8::text[])
      AS r(k, q, a, p, m, s, u, t)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING queue
  ), wake AS MATERIALIZED (
    SELECT pg_notify('jobs', queue) FROM (SELECT DISTINCT queue FROM ins) AS queues
  )
  SELECT (SELECT count(*) FROM ins)::int AS inserted, (SELECT count(*) FROM wake)::int AS woken`

/** Inserts `rows(k)` (call k's jobs) one autocommitted statement at a time until the tally stops. */
export const insertLoop = (
  baseline: InsertBaseline,
  client: Client,
  rows: (k: number) => ReadonlyArray<JobRow>,
  tally: Tally,
) =>
  Effect.tryPromise({
    try: async () => {
      for (let k = 0; !tally.stopped; k++) {
        const jobs = rows(k)
        if (baseline !== "oursStatement") {
          await client.query({ ...statements[baseline], values: insertValues(jobs) })
        } else {
          const values = [
            jobs.map((j) => j.kind),
            [],
            jobs.map((j) => JSON.stringify(j.args)),
            [],
            [],
            [],
            jobs.map((j) => j.uniqueKey),
            jobs.map((j) => j.traceParent),
          ]
          await client.query({ name: "ours-jobs-insert", text: oursStatementText, values })
        }
        tally.add(jobs.length)
      }
    },
    catch: (cause) => new BaselineFailed({ baseline: `${baseline} insert`, cause }),
  })

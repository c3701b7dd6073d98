/**
 * What a chaos run samples every `every` (10 s by default): the resident memory of each worker
 * process (from /proc), each consumer's lag (head minus cursor), the pending webhook deliveries and
 * unfinished push jobs, and the connections PostgreSQL holds for the run's database. A soak judges
 * from these whether memory stays flat and lag bounded.
 */
import { readFileSync } from "node:fs"
import { type Duration, Effect } from "effect"
import { SqlClient } from "effect/sql"

export interface Sample {
  /** Seconds since production began. */
  readonly t: number
  /** Resident memory of worker k in MiB (null while it is down). */
  readonly rssMiB: ReadonlyArray<number | null>
  readonly lag: Record<string, number>
  readonly pendingDeliveries: number
  readonly pushUnfinished: number
  readonly pgConnections: number
}

const rssOf = (pid: number | undefined) => {
  if (pid === undefined) return null
  try {
    const kb = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]
    return kb === undefined ? null : Math.round(Number(kb) / 102.4) / 10
  } catch {
    return null
  }
}

const take = (startedAt: number, pids: () => ReadonlyArray<number | undefined>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ lag: Record<string, number>; pending: number; push: number; connections: number }>`
      SELECT (SELECT jsonb_object_agg(c.name, (s.value - c.last_seq)::int)
                FROM event_consumer_cursors AS c, event_seq AS s WHERE c.name IN ('webhooks', 'push')) AS lag,
             (SELECT count(*) FROM webhook_deliveries WHERE state = 'pending')::int AS pending,
             (SELECT count(*) FROM jobs WHERE kind IN ('push.batch', 'push.deliver')
                AND state IN ('available', 'scheduled', 'retryable', 'running'))::int AS push,
             (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database())::int AS connections`
    return {
      t: Math.round((Date.now() - startedAt) / 100) / 10,
      rssMiB: pids().map(rssOf),
      lag: row!.lag,
      pendingDeliveries: row!.pending,
      pushUnfinished: row!.push,
      pgConnections: row!.connections,
    } satisfies Sample
  })

/** One line of a sample, for the run's progress. */
export const line = (s: Sample) =>
  `t=${s.t}s lag ${JSON.stringify(s.lag)} pending deliveries ${s.pendingDeliveries} push ${s.pushUnfinished} connections ${s.pgConnections} rss ${s.rssMiB.join("/")} MiB`

/**
 * Samples into `into` every `every` until interrupted, each also handed to `log`; a sample that
 * fails (the server is down) is skipped.
 */
export const collect = (
  into: Array<Sample>,
  startedAt: number,
  pids: () => ReadonlyArray<number | undefined>,
  every: Duration.Input,
  log: (line: string) => void,
) =>
  Effect.forever(
    Effect.andThen(
      take(startedAt, pids).pipe(
        Effect.tap((s) =>
          Effect.sync(() => {
            into.push(s)
            log(line(s))
          }),
        ),
        Effect.ignore,
      ),
      Effect.sleep(every),
    ),
  )

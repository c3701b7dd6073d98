import { fileURLToPath } from "node:url"
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { EventLog } from "../../src/log/EventLog.ts"
import * as LogModes from "../support/LogModes.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as TestDatabase from "../support/TestDatabase.ts"

const worker = fileURLToPath(new URL("../support/sequencerWorker.ts", import.meta.url))

// Producers only: the sequencers are the child processes.
const Live = EventLog.layerPostCommit.pipe(Layer.provideMerge(TestDatabase.layer()))

layer(Live, { excludeTestServices: true })("Sequencer processes", (it) => {
  it.effect(
    "SequencerFailover: the holder's process is SIGKILLed mid-batch; another takes over; no seq is given twice or skipped, no event is lost",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase.TestDatabase
        const log = yield* EventLog
        const sql = yield* SqlClient.SqlClient
        const env = (holder: string, extra: Record<string, string> = {}) => ({
          DATABASE_URL: db.url,
          HOLDER: holder,
          LEASE_MS: "1500",
          ...extra,
        })

        // Two producers append throughout, before, during and after the failover.
        const stop = yield* Deferred.make<void>()
        const producer = (p: number) =>
          Effect.gen(function* () {
            let appends = 0
            let events = 0
            for (let k = 0; !(yield* Deferred.isDone(stop)); k++) {
              const n = 1 + (k % 3)
              yield* log.append(
                Array.from({ length: n }, (_, i) => ({ space: `s${p}`, type: "t", actor: "a", payload: { p, k, i } })),
              )
              appends++
              events += n
              yield* Effect.sleep("2 millis")
            }
            return { appends, events }
          })
        const producers = yield* Effect.forkChild(Effect.all([producer(0), producer(1)], { concurrency: 2 }))

        const victim = yield* NodeProcess.start(worker, [], env("victim", { BLOCK_IN_BATCH: "1" }))
        yield* victim.waitFor(/^ACQUIRED victim/)
        const inBatch = yield* victim.waitFor(/^IN_BATCH /)
        const [, killedFirst] = inBatch.split(" ")
        const standby = yield* NodeProcess.start(worker, [], env("standby"))
        // Mid-batch: its transaction has moved rows and bumped the counter, and not committed.
        victim.child.kill("SIGKILL")
        assert.strictEqual((yield* victim.exited).signal, "SIGKILL")

        yield* standby.waitFor(/^ACQUIRED standby/)
        const firstBatch = yield* standby.waitFor(/^BATCH /)
        assert.strictEqual(
          firstBatch.split(" ")[1],
          killedFirst,
          "the standby gives the killed batch's seqs again, from the same first one",
        )
        // Some more batches after the takeover, then the producers stop.
        yield* standby.waitFor(/^BATCH /, 5)
        yield* Deferred.succeed(stop, undefined)
        const produced = yield* Fiber.join(producers)
        yield* LogModes.settled

        const appends = produced.reduce((n, p) => n + p.appends, 0)
        const events = produced.reduce((n, p) => n + p.events, 0)
        const [row] = yield* sql<{
          rows: number
          seqs: number
          first: bigint
          last: bigint
          head: bigint
          appends: number
          distinct: number
          split: number
        }>`
          SELECT count(*)::int AS rows, count(DISTINCT seq)::int AS seqs, min(seq) AS first, max(seq) AS last,
                 (SELECT value FROM event_seq) AS head, count(DISTINCT append_id)::int AS appends,
                 count(DISTINCT payload)::int AS distinct,
                 (SELECT count(*)::int FROM (
                    SELECT append_id FROM event_log GROUP BY append_id HAVING max(seq) - min(seq) + 1 <> count(*)
                  ) AS x) AS split
          FROM event_log`
        assert.deepStrictEqual(
          { ...row! },
          {
            rows: events,
            seqs: events,
            first: 1n,
            last: BigInt(events),
            head: BigInt(events),
            appends,
            distinct: events,
            split: 0,
          },
          "every committed event once, seqs exactly 1..N, each append's events together",
        )

        standby.child.kill("SIGTERM")
        const stopped = yield* standby.exited
        assert.strictEqual(stopped.code, 0, stopped.stderr)
        const [lease] = yield* sql<{ free: boolean }>`
          SELECT expires_at < clock_timestamp() AS free FROM event_sequencer`
        assert.isTrue(lease!.free, "a stopping holder gives the lease up")
      }).pipe(Effect.scoped),
    90_000,
  )
})

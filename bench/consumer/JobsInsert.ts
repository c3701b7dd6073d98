/**
 * Part 3 of `consumer`: `Jobs.insert` of 1,000 rows per statement against the same rows through
 * `unnest` on `pg`, with diagnostic steps (no indexes; the conflict clause; `Jobs.insert`'s own
 * statement on `pg`) that split the gap into its causes. Each run starts from empty job tables
 * and a CHECKPOINT.
 */
import { Console, Effect } from "effect"
import { SqlClient } from "effect/sql"
import type { Client } from "pg"
import { Jobs } from "../../src/jobs/Jobs.ts"
import { round0, round3 } from "../harness/Figures.ts"
import * as Rotation from "../harness/Rotation.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as ConsumerBaselines from "./ConsumerBaselines.ts"
import { asJobInsert, insertBatch, insertRows, type OursServices } from "./ConsumerSample.ts"

export const implementations = ["ours", "raw", "rawUnindexed", "rawOnConflict", "oursStatement"] as const
export type InsertImplementation = (typeof implementations)[number]
type InsertRun = Throughput.Run & { readonly repeat: number }

const ours = (services: OursServices, settings: Throughput.Settings) =>
  Throughput.measure(settings, (tally) =>
    Effect.gen(function* () {
      const jobs = yield* Jobs
      for (let k = 0; !tally.stopped; k++) {
        const inserted = yield* jobs.insert(insertBatch(k).map(asJobInsert))
        tally.add(inserted.inserted)
      }
    }),
  ).pipe(Effect.provide(services))

const insertOnce = (
  input: { readonly ours: OursServices; readonly client: Client; readonly settings: Throughput.Settings },
  implementation: InsertImplementation,
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(`TRUNCATE jobs, ${ConsumerBaselines.unindexedTable}`)
    yield* sql.unsafe("CHECKPOINT")
    return implementation === "ours"
      ? yield* ours(input.ours, input.settings)
      : yield* Throughput.measure(input.settings, (tally) =>
          ConsumerBaselines.insertLoop(implementation, input.client, insertBatch, tally),
        )
  })

/** Every implementation in turn, `settings.repeats` times; rows/s medians and their ratios. */
export const jobsInsert = (input: {
  readonly ours: OursServices
  readonly client: Client
  readonly settings: Throughput.Settings
}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(ConsumerBaselines.createUnindexedTable)
    const runs = yield* Rotation.rotate(implementations, input.settings.repeats, (implementation, repeat) =>
      insertOnce(input, implementation).pipe(
        Effect.tap((r) =>
          Console.log(
            `Jobs.insert ${insertRows} rows, ${implementation} #${repeat}: ${round0(r.eventsPerSecond)} rows/s (client ${r.clientCores} cores, machine ${Math.round(r.machineBusy * 100)}% busy)`,
          ),
        ),
        Effect.map((r): InsertRun => ({ repeat, ...r })),
      ),
    )
    const median = (impl: InsertImplementation) => Throughput.median(runs[impl].map((r) => r.eventsPerSecond))
    const result = {
      rowsPerStatement: insertRows,
      rowsPerSecond: Rotation.mapOf(implementations, (impl) => round0(median(impl))),
      ratio: {
        oursOverRaw: round3(median("ours") / median("raw")),
        rawUnindexedOverRaw: round3(median("rawUnindexed") / median("raw")),
        // The gap's causes, one step each: the conflict clause, the rest of the statement, the client.
        rawOnConflictOverRaw: round3(median("rawOnConflict") / median("raw")),
        oursStatementOverRawOnConflict: round3(median("oursStatement") / median("rawOnConflict")),
        oursOverOursStatement: round3(median("ours") / median("oursStatement")),
      },
      clientCores: Rotation.mapOf(implementations, (impl) => Throughput.median(runs[impl].map((r) => r.clientCores))),
      runs: Rotation.mapOf(implementations, (impl) => runs[impl].map(roundInsertRun)),
    }
    // The unrounded medians too, for the table's ratios.
    return { result, median }
  })

export type JobsInsertResult = Effect.Success<ReturnType<typeof jobsInsert>>

// Throughput counts "events"; here they are job rows.
const roundInsertRun = ({ eventsPerSecond, events, committed, seconds, ...r }: InsertRun) => ({
  ...r,
  rowsPerSecond: round0(eventsPerSecond),
  rows: events,
  committedRows: committed,
  seconds: round3(seconds),
})

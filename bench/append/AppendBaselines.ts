/**
 * What `EventLog.append` is measured against, written the way an application would write it with
 * the plain `pg` driver, each producer on its own `pg.Client`, one transaction per batch:
 *
 *   (a) naive counter: BEGIN; UPDATE event_seq … RETURNING; INSERT …; COMMIT. Four round trips,
 *       and the counter's row lock is held across two of them plus the commit flush. Gapless,
 *       like ours, so it is the pattern ours has to beat.
 *   (b) no counter: BEGIN; INSERT …; COMMIT into the same `event_log`, seqs from a counter local
 *       to each producer (producer p of P writes p+1, p+1+P, p+1+2P, …). Nothing is shared, so
 *       commits group-flush freely: the ceiling a gapless counter costs against.
 *
 * Both use named prepared statements, as a tuned application would, so neither baseline is
 * weakened by re-parsing. Rows are serialized once up front; a baseline's loop does no more
 * work per transaction than binding them.
 */

import { Effect, Schema, type Scope } from "effect"
import { Client, type ClientConfig } from "pg"
import type { Tally } from "../harness/Throughput.ts"
import * as Throughput from "../harness/Throughput.ts"

export type Baseline = "naive" | "plain"

/** An event as the baselines bind it: space, type, actor, payload JSON, trace parent. */
export type Row = readonly [string, string, string, string, string]

export class BaselineFailed extends Schema.TaggedError<BaselineFailed>()("BaselineFailed", {
  baseline: Schema.String,
  cause: Schema.Defect(),
}) {
  override get message() {
    return `baseline ${this.baseline} failed: ${String(this.cause)}`
  }
}

/** Opens one client per producer; the scope closes them. */
export const connect = (config: ClientConfig, producers: number) =>
  Effect.forEach(
    Array.from({ length: producers }, () => new Client(config)),
    (client) =>
      Effect.acquireRelease(
        Effect.tryPromise({
          try: () => client.connect().then(() => client),
          catch: (cause) => new BaselineFailed({ baseline: "connect", cause }),
        }),
        (c) => Effect.promise(() => c.end()),
      ),
    { concurrency: "unbounded" },
  ) satisfies Effect.Effect<ReadonlyArray<Client>, BaselineFailed, Scope.Scope>

/** Runs one producer loop per client until the tally stops, each committing `batches` in turn. */
export const produce = (
  baseline: Baseline,
  clients: ReadonlyArray<Client>,
  batches: ReadonlyArray<ReadonlyArray<Row>>,
  tally: Tally,
) =>
  Effect.tryPromise({
    try: () =>
      Promise.all(
        clients.map(async (client, p) => {
          for (let k = p, next = p + 1; !tally.stopped; k++) {
            const batch = batches[k % batches.length]!
            if (baseline === "naive") {
              await naive(client, batch)
            } else {
              await plain(client, batch, next, clients.length)
              next += batch.length * clients.length
            }
            tally.add(batch.length)
          }
        }),
      ),
    catch: (cause) => new BaselineFailed({ baseline, cause }),
  })

const naive = async (client: Client, batch: ReadonlyArray<Row>) => {
  const n = batch.length
  await client.query("BEGIN")
  const bumped = await client.query<{ value: string; epoch: number }>({
    name: "naive-bump",
    text: "UPDATE event_seq SET value = value + $1 RETURNING value, epoch",
    values: [n],
  })
  const head = bumped.rows[0]!
  const first = BigInt(head.value) - BigInt(n) + 1n
  await client.query({
    name: `insert-${n}`,
    text: insertText(n),
    values: batch.flatMap((row, i) => [String(first + BigInt(i)), head.epoch, ...row]),
  })
  await client.query("COMMIT")
}

const plain = async (client: Client, batch: ReadonlyArray<Row>, first: number, stride: number) => {
  await client.query("BEGIN")
  await client.query({
    name: `insert-${batch.length}`,
    text: insertText(batch.length),
    values: batch.flatMap((row, i) => [String(first + i * stride), 1, ...row]),
  })
  await client.query("COMMIT")
}

const columnsPerRow = 7

/** `INSERT … VALUES ($1, $2, now(), $3, …), …` for `n` rows: seq, epoch, then the `Row`. */
const insertText = (n: number) => {
  const rows = Array.from({ length: n }, (_, i) => {
    const $ = (k: number) => `$${i * columnsPerRow + k}`
    return `(${$(1)}, ${$(2)}, now(), ${$(3)}, ${$(4)}, ${$(5)}, ${$(6)}::jsonb, ${$(7)})`
  })
  return `INSERT INTO event_log (seq, epoch, occurred_at, space_id, type, actor, payload, trace_parent) VALUES ${rows.join(", ")}`
}

/** One baseline run: `producers` clients connected before the clock starts, the same batches. */
export const measure = (
  kind: Baseline,
  config: ClientConfig,
  settings: Throughput.Settings,
  producers: number,
  rows: ReadonlyArray<ReadonlyArray<Row>>,
) =>
  Effect.gen(function* () {
    const clients = yield* connect(config, producers)
    return yield* Throughput.measure(settings, (tally) => produce(kind, clients, rows, tally))
  }).pipe(Effect.scoped)

/**
 * The push job as the `push` round inserts it and the worker runs it: kind `push.batch` on queue
 * `push`, one event to a batch of at most `push.batch_size` registrations per job. The round
 * (`PushFanOut`) writes the args, in SQL or in TypeScript, and the job kind (`PushDelivery`)
 * decodes them, both against the one `BatchArgs` here: a field changed here fails to compile where
 * the args are written, rather than failing every job when it runs. Neither side imports the other.
 *
 * The args are also the job's per-registration state: `registrations` lists the registrations
 * still to send to, and a run rewrites it as they settle (`JobProgress`), so an attempt after a
 * crash, a retry or a snooze sends only to what is left; `dead` keeps why the ones that died did.
 *
 * `push.deliver` is the kind of the rounds before batches: one (registration, event) per job. It
 * keeps its name and args, so that jobs inserted before an upgrade are still delivered (as a batch
 * of one), and so that a worker of the older version never claims a batch it cannot decode.
 */
import { Schema } from "effect"
import type { SqlClient, Statement } from "effect/sql"

/** The kind the `push` round inserts. */
export const deliverKind = "push.batch"
/** The kind of the single-message jobs of earlier versions, still run. */
export const legacyDeliverKind = "push.deliver"
export const queue = "push"

/** Registrations per job unless `push.batch_size` says otherwise (docs/push.md says why). */
export const defaultBatchSize = 100
export const maxBatchSize = 1000

const Decimal = Schema.String.check(Schema.isPattern(/^[0-9]{1,19}$/))

/**
 * The event (its seq as decimal text, int8 may pass 2^53) and its time, so its lookup reads one
 * partition, and the registrations still to send it to.
 */
export const BatchArgs = Schema.Struct({
  seq: Decimal,
  /** Absent, every partition is looked in. */
  at: Schema.optional(Schema.String),
  registrations: Schema.Array(Decimal).check(Schema.isMaxLength(maxBatchSize)),
  /**
   * Registrations an earlier attempt found dead (denied, refused) and recorded as settled, with
   * why: kept until an attempt ends the job, which names them, whatever crashed in between.
   */
  dead: Schema.optional(Schema.Record(Decimal, Schema.String)),
})
export type BatchArgs = typeof BatchArgs.Type

/** A `push.deliver` job's args: one registration and the event. */
export const DeliverArgs = Schema.Struct({
  registration: Decimal,
  seq: Decimal,
  at: Schema.optional(Schema.String),
})
export type DeliverArgs = typeof DeliverArgs.Type

/**
 * What a `push.deliver` job may hold: its first args, or batch args once a run of this version
 * recorded its progress on it.
 */
export const LegacyArgs = Schema.Union([BatchArgs, DeliverArgs])

/** Either shape as the batch it means. */
export const asBatch = (args: BatchArgs | DeliverArgs): BatchArgs =>
  "registrations" in args
    ? args
    : { seq: args.seq, registrations: [args.registration], ...(args.at === undefined ? {} : { at: args.at }) }

/**
 * The args of the batch `args` for `registrations` (what is left of it, or a part split off it),
 * with `dead` (none for a part split off).
 */
export const batchArgsJson = (
  args: BatchArgs,
  registrations: ReadonlyArray<string>,
  dead: Readonly<Record<string, string>> = {},
): Schema.Json => {
  const json: Record<string, Schema.Json> = { seq: args.seq, registrations: [...registrations] }
  if (args.at !== undefined) json.at = args.at
  if (Object.keys(dead).length > 0) json.dead = { ...dead }
  return json
}

/**
 * The args as a `jsonb` expression, for a round that makes its jobs in one statement:
 * `registrations` is a `jsonb` array of decimal text.
 */
export const batchArgsInSql = (
  sql: SqlClient.SqlClient,
  args: Readonly<Record<Exclude<keyof typeof BatchArgs.fields, "dead">, Statement.Fragment>>,
) => sql`jsonb_build_object('seq', ${args.seq}, 'at', ${args.at}, 'registrations', ${args.registrations})`

/**
 * A batch's receiver in the round's unique key: its first registration after this prefix, apart
 * from a single job's (the registration alone).
 */
export const batchReceiverPrefix = "b"

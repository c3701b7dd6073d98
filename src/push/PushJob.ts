/**
 * The `push.deliver` job as the `push` round inserts it and the worker runs it: kind
 * `push.deliver` on queue `push`, one (registration, event) per job. The round (`PushFanOut`)
 * writes the args, in SQL or in TypeScript, and the job kind (`PushDelivery`) decodes them, both
 * against the one `DeliverArgs` here: a field changed here fails to compile where the args are
 * written, rather than failing every job when it runs. Neither side imports the other.
 */
import { Schema } from "effect"
import type { SqlClient, Statement } from "effect/sql"

export const deliverKind = "push.deliver"
export const queue = "push"

const Decimal = Schema.String.check(Schema.isPattern(/^[0-9]{1,19}$/))

/**
 * The registration and the event, both as decimal text (int8 may pass 2^53), and the event's
 * time, so its lookup reads one partition.
 */
export const DeliverArgs = Schema.Struct({
  registration: Decimal,
  seq: Decimal,
  /** Absent, every partition is looked in. */
  at: Schema.optional(Schema.String),
})
export type DeliverArgs = typeof DeliverArgs.Type

/** The args as a `jsonb` expression, for a round that makes its jobs in one statement. */
export const deliverArgsInSql = (
  sql: SqlClient.SqlClient,
  args: Readonly<Record<keyof typeof DeliverArgs.fields, Statement.Fragment>>,
) => sql`jsonb_build_object('registration', ${args.registration}, 'seq', ${args.seq}, 'at', ${args.at})`

/**
 * What an attempt of a push batch reads, in one statement: the event once, each registration still
 * to send to (or that it is gone), and, when `Permissions` answers in SQL, the `push.deliver` right
 * once per principal among them (a principal with five browsers is asked once, not five times).
 *
 * The statement keeps one generic plan per connection, planned once, not at every execution (0.9
 * ms of the backend's CPU a job, nine times its execution, in the push benchmark at 200 events/s):
 * - the event is read from the one leaf of the log that holds its time, which travels in the job
 *   (`at`), named in the text (`EventLogLeaf`): over `event_log` the generic plan would set up
 *   every leaf, and PostgreSQL planned each execution afresh instead. A job without a time reads
 *   `event_log` by seq alone.
 * - the registrations' array is read through a subquery, so the planner sees its length in no
 *   plan: seen in a custom plan, a batch of 3 looked cheaper than the generic plan's guess, and
 *   PostgreSQL never switched to the generic one.
 *
 * The registrations and the rights are probed by key, one batch's worth: left to itself, the
 * planner prices 100 index probes above one pass over the table and reads every registration and
 * every grant for each batch (10,000 of each per batch in the fan-out benchmark, so an event to
 * N members cost N^2/100 rows). `OFFSET 0` keeps each probe a subquery of its own, run per row.
 */
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import { type PermissionsShape, pushDeliver } from "../authz/Permissions.ts"
import * as EventLogLeaf from "../log/EventLogLeaf.ts"
import type { Environment, Kind } from "./NativeRegistration.ts"
import type { BatchArgs } from "./PushJob.ts"

/** The event of a batch; `undefined` when it left the log. */
export interface TargetEvent {
  readonly space: string
  readonly type: string
  readonly epoch: number
  readonly occurredAt: Date
  readonly summary: string | null
}

/**
 * One registration of the batch; `kind` is `null` when it was removed. A browser has `endpoint` and
 * the keys, a device `token` (and for APNs `topic` and `environment`).
 */
export interface Target {
  readonly registration: string
  readonly principal: string | null
  readonly kind: Kind | null
  readonly endpoint: string | null
  readonly token: string | null
  readonly topic: string | null
  readonly environment: Environment | null
  readonly p256dh: string | null
  readonly auth: string | null
  /** The principal's right from SQL; `null` when `Permissions` does not answer in SQL. */
  readonly allowed: boolean | null
}

export interface Targets {
  readonly event: TargetEvent | undefined
  readonly targets: ReadonlyArray<Target>
}

interface Row extends Target {
  readonly space: string | null
  readonly type: string | null
  readonly epoch: number | null
  readonly occurredAt: Date | null
  readonly summary: string | null
}

/**
 * The statement, whose composed text docs/sql/push-targets.sql keeps, with `event` the join that
 * finds the event (`EventLogLeaf.read`).
 */
export const targetsStatement = (
  sql: SqlClient.SqlClient,
  permissions: PermissionsShape,
  args: BatchArgs,
  event: (seq: Statement.Fragment) => Statement.Fragment,
) => {
  const rights =
    permissions.inSql === undefined
      ? sql``
      : sql`, rights AS MATERIALIZED (
          SELECT p.principal, a.allowed
          FROM (SELECT DISTINCT principal FROM regs WHERE principal IS NOT NULL) AS p CROSS JOIN ev
          CROSS JOIN LATERAL (
            SELECT ${permissions.inSql({ principal: sql`p.principal`, spaceId: sql`ev.space_id` }, pushDeliver)} AS allowed
            OFFSET 0
          ) AS a
          WHERE ev.space_id IS NOT NULL
        )`
  const allowed = permissions.inSql === undefined ? sql`NULL::boolean` : sql`rights.allowed`
  const joinRights = permissions.inSql === undefined ? sql`` : sql`LEFT JOIN rights ON rights.principal = g.principal`
  return sql<Row>`
    WITH ev AS MATERIALIZED (
      SELECT e.space_id, e.type, e.epoch, e.occurred_at,
             CASE WHEN jsonb_typeof(e.payload -> 'summary') = 'string' THEN left(e.payload ->> 'summary', 1000) END AS summary
      FROM (SELECT ${args.seq}::bigint AS seq) AS k LEFT JOIN ${event(sql`k.seq`)}
    ), regs AS MATERIALIZED (
      SELECT k.registration, r.principal, r.kind, r.endpoint, r.p256dh, r.auth, r.token, r.topic, r.environment
      FROM unnest((SELECT ${args.registrations}::bigint[])) WITH ORDINALITY AS k (registration, n)
      LEFT JOIN LATERAL (SELECT * FROM push_registrations AS r WHERE r.id = k.registration OFFSET 0) AS r ON true
      ORDER BY k.n
    )${rights}
    SELECT g.registration::text AS registration, g.principal, g.kind, g.endpoint, g.p256dh, g.auth,
           g.token, g.topic, g.environment,
           ev.space_id AS space, ev.type, ev.epoch, ev.occurred_at AS "occurredAt", ev.summary, ${allowed} AS allowed
    FROM regs AS g CROSS JOIN ev ${joinRights}`
}

/**
 * The targets of one attempt, the event read from its leaf (`leaves`: the days' forms found so
 * far); exported for the tests that hold its plan to one leaf of the log and to one plan.
 */
export const readTargets = (
  sql: SqlClient.SqlClient,
  permissions: PermissionsShape,
  leaves: EventLogLeaf.Leaves,
  args: BatchArgs,
) =>
  EventLogLeaf.read(sql, leaves, args.at === undefined ? undefined : new Date(args.at), (event) =>
    targetsStatement(sql, permissions, args, event),
  ).pipe(
    Effect.map((rows): Targets => {
      const first = rows[0]
      const event =
        first === undefined ||
        first.space === null ||
        first.type === null ||
        first.epoch === null ||
        first.occurredAt === null
          ? undefined
          : {
              space: first.space,
              type: first.type,
              epoch: first.epoch,
              occurredAt: first.occurredAt,
              summary: first.summary,
            }
      return {
        event,
        targets: rows.map(
          ({ registration, principal, kind, endpoint, p256dh, auth, token, topic, environment, allowed }) => ({
            registration,
            principal,
            kind,
            endpoint,
            p256dh,
            auth,
            token,
            topic,
            environment,
            allowed,
          }),
        ),
      }
    }),
  )

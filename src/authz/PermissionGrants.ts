/**
 * The default `Permissions`: a grant row (`principal`, `action`, `space_id`) allows; no row denies.
 * It answers in SQL too (`inSql`), so the drainer reads deliveries and rights in one statement.
 * `grant`, `revoke` and `list` manage the rows for hosts that use this model (the admin API and
 * CLI call them); `isModel` tells whether a `Permissions` is this one, so they can say when a host
 * replaced it and the rows would decide nothing.
 */
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { pgFailure } from "../platform/PgError.ts"
import { type PermissionCheck, Permissions, type PermissionsShape, permissionsUnavailable } from "./Permissions.ts"

const unavailable = (checks: ReadonlyArray<PermissionCheck>) =>
  permissionsUnavailable("permission_grants", checks, (e: SqlError) => pgFailure(e).message)

/** The `Permissions` this layer made, so `isModel` recognises them. */
const made = new WeakSet<object>()

/** Whether `permissions` is this model's (a host's own `Permissions` is not). */
export const isModel = (permissions: PermissionsShape): boolean => made.has(permissions)

export const layer = Layer.effect(
  Permissions,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const allowedEach = (checks: ReadonlyArray<PermissionCheck>) =>
      checks.length === 0
        ? Effect.succeed([])
        : sql<{ ok: boolean }>`
            SELECT EXISTS (
              SELECT 1 FROM permission_grants AS g
              WHERE g.principal = c.principal AND g.action = c.action AND g.space_id = c.space_id
            ) AS ok
            FROM unnest(${checks.map((c) => c.principal)}::text[], ${checks.map((c) => c.action)}::text[],
                        ${checks.map((c) => c.spaceId)}::text[]) WITH ORDINALITY AS c(principal, action, space_id, n)
            ORDER BY c.n`.pipe(
            Effect.map((rows) => rows.map((r) => r.ok)),
            Effect.mapError(unavailable(checks)),
          )
    const permissions = Permissions.make({
      allowed: (principal, action, spaceId) =>
        sql<{ ok: boolean }>`
          SELECT EXISTS (
            SELECT 1 FROM permission_grants WHERE principal = ${principal} AND action = ${action} AND space_id = ${spaceId}
          ) AS ok`.pipe(
          Effect.map((rows) => rows[0]?.ok === true),
          Effect.mapError(unavailable([{ principal, action, spaceId }])),
        ),
      allowedEach,
      inSql: ({ principal, spaceId }, action) => sql`
        EXISTS (
          SELECT 1 FROM permission_grants AS g
          WHERE g.principal = ${principal} AND g.action = ${action} AND g.space_id = ${spaceId}
        )`,
    })
    made.add(permissions)
    return permissions
  }),
)

export const grant = Effect.fn("PermissionGrants.grant")(function* (
  principal: string,
  action: string,
  spaceId: string,
) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    INSERT INTO permission_grants (principal, action, space_id) VALUES (${principal}, ${action}, ${spaceId})
    ON CONFLICT DO NOTHING`
})

export const revoke = Effect.fn("PermissionGrants.revoke")(function* (
  principal: string,
  action: string,
  spaceId: string,
) {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    DELETE FROM permission_grants WHERE principal = ${principal} AND action = ${action} AND space_id = ${spaceId}`
})

export interface Grant {
  readonly principal: string
  readonly action: string
  readonly space: string
}

/** The grants, of one principal or on one space when asked, in (principal, action, space) order. */
export const list = Effect.fn("PermissionGrants.list")(function* (
  filter: { readonly principal?: string | undefined; readonly space?: string | undefined },
  limit: number,
) {
  const sql = yield* SqlClient.SqlClient
  return yield* sql<Grant>`
    SELECT principal, action, space_id AS space FROM permission_grants
    WHERE ${filter.principal === undefined ? sql`true` : sql`principal = ${filter.principal}`}
      AND ${filter.space === undefined ? sql`true` : sql`space_id = ${filter.space}`}
    ORDER BY principal, action, space_id LIMIT ${limit}`
})

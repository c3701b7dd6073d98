/**
 * The default `Permissions`: a grant row (`principal`, `action`, `space_id`) allows; no row denies.
 * `grant` and `revoke` manage the rows for hosts that use this model.
 */
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { Permissions } from "./Permissions.ts"

export const layer = Layer.effect(
  Permissions,
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    return Permissions.of({
      allowed: (principal, action, spaceId) =>
        sql<{ ok: boolean }>`
          SELECT EXISTS (
            SELECT 1 FROM permission_grants WHERE principal = ${principal} AND action = ${action} AND space_id = ${spaceId}
          ) AS ok`.pipe(Effect.map((rows) => rows[0]?.ok === true)),
    })
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

/**
 * `Permissions` kept in memory, for host tests that need no database: the grants table's model
 * (a grant of `principal`, `action`, `space_id` allows, exactly as spelled; no grant denies;
 * granting twice is one grant; revoking what was never granted does nothing) without its table.
 * It never fails, and gives no `inSql`: the drainer asks it with `allowedEach`.
 */
import { Context, Effect, Layer } from "effect"
import { Permissions } from "./Permissions.ts"

export class PermissionsMemory extends Context.Service<
  PermissionsMemory,
  {
    readonly grant: (principal: string, action: string, spaceId: string) => Effect.Effect<void>
    readonly revoke: (principal: string, action: string, spaceId: string) => Effect.Effect<void>
  }
>()("bothy/PermissionsMemory") {}

// JSON of the three strings: no separator a principal or space could contain makes two grants one.
const key = (principal: string, action: string, spaceId: string) => JSON.stringify([principal, action, spaceId])

/** Provides `Permissions` and `PermissionsMemory` (to grant and revoke) over one empty set of grants. */
export const layer: Layer.Layer<Permissions | PermissionsMemory> = Layer.effectContext(
  Effect.sync(() => {
    const grants = new Set<string>()
    const allowed = (principal: string, action: string, spaceId: string) => grants.has(key(principal, action, spaceId))
    return Context.make(
      Permissions,
      Permissions.make({
        allowed: (principal, action, spaceId) => Effect.sync(() => allowed(principal, action, spaceId)),
        allowedEach: (checks) => Effect.sync(() => checks.map((c) => allowed(c.principal, c.action, c.spaceId))),
      }),
    ).pipe(
      Context.add(
        PermissionsMemory,
        PermissionsMemory.of({
          grant: (principal, action, spaceId) => Effect.sync(() => void grants.add(key(principal, action, spaceId))),
          revoke: (principal, action, spaceId) =>
            Effect.sync(() => void grants.delete(key(principal, action, spaceId))),
        }),
      ),
    )
  }),
)

export const grant = (principal: string, action: string, spaceId: string) =>
  Effect.flatMap(PermissionsMemory, (m) => m.grant(principal, action, spaceId))

export const revoke = (principal: string, action: string, spaceId: string) =>
  Effect.flatMap(PermissionsMemory, (m) => m.revoke(principal, action, spaceId))

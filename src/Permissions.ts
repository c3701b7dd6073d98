/**
 * Who may do what, asked at delivery time: a right revoked between an event's round and its
 * delivery stops the delivery. This is the contract a host app implements; `PermissionGrants`
 * is the default implementation backed by the `permission_grants` table.
 */
import { Context, type Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/** The action a webhook subscription's owner needs on an event's space for it to be delivered. */
export const webhookDeliver = "webhook_out.deliver"

export class Permissions extends Context.Service<
  Permissions,
  {
    readonly allowed: (principal: string, action: string, spaceId: string) => Effect.Effect<boolean, SqlError>
  }
>()("bothy/Permissions") {}

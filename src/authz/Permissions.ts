/**
 * Who may do what, asked at delivery time: a right revoked between an event's round and its
 * delivery stops the delivery. This is the contract a host app implements; `PermissionGrants`
 * is the default implementation backed by the `permission_grants` table.
 *
 * A drainer asks about the few deliveries it has read ahead in one call (`allowedEach`), so a
 * host whose check costs a round trip can answer them with one; `make` derives it from `allowed`
 * for a host that only has the single check. A host whose rights live in bothy's own database can
 * also give the rule as SQL (`inSql`): the drainer then reads deliveries and rights in one
 * statement.
 */
import { Context, Effect } from "effect"
import type { Statement } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"

/** The action a webhook subscription's owner needs on an event's space for it to be delivered. */
export const webhookDeliver = "webhook_out.deliver"

export interface PermissionCheck {
  readonly principal: string
  readonly action: string
  readonly spaceId: string
}

export interface PermissionsShape {
  readonly allowed: (principal: string, action: string, spaceId: string) => Effect.Effect<boolean, SqlError>
  /** One answer per check, in the same order. */
  readonly allowedEach: (checks: ReadonlyArray<PermissionCheck>) => Effect.Effect<ReadonlyArray<boolean>, SqlError>
  /**
   * The same rule as a boolean SQL expression, given SQL expressions for the principal and the
   * space (columns of the statement it goes into) and the action; it must answer as `allowed`
   * would at that statement's snapshot.
   */
  readonly inSql?: (
    expressions: { readonly principal: Statement.Fragment; readonly spaceId: Statement.Fragment },
    action: string,
  ) => Statement.Fragment
}

export class Permissions extends Context.Service<Permissions, PermissionsShape>()("bothy/Permissions") {
  /** A `Permissions` from the single check; `allowedEach`, when not given, asks it once per check in turn. */
  static make(options: {
    readonly allowed: PermissionsShape["allowed"]
    readonly allowedEach?: PermissionsShape["allowedEach"]
    readonly inSql?: PermissionsShape["inSql"]
  }): PermissionsShape {
    return Permissions.of({
      allowed: options.allowed,
      ...(options.inSql === undefined ? {} : { inSql: options.inSql }),
      allowedEach:
        options.allowedEach ??
        ((checks) => Effect.forEach(checks, (c) => options.allowed(c.principal, c.action, c.spaceId))),
    })
  }
}

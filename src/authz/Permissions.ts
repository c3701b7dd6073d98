/**
 * Who may do what, asked at delivery time: a right revoked between an event's round and its
 * delivery stops the delivery. This is the contract a host app implements; `PermissionGrants`
 * is the default implementation backed by the `permission_grants` table, and `PermissionsMemory`
 * keeps the same rows in memory for host tests. Both pass one conformance suite.
 *
 * A drainer asks about the few deliveries it has read ahead in one call (`allowedEach`), so a
 * host whose check costs a round trip can answer them with one; `make` derives it from `allowed`
 * for a host that only has the single check. A check that cannot be answered fails with
 * `PermissionsUnavailable`: the delivery is retried later, never sent unchecked.
 *
 * `inSql` is an optimisation, not part of what a host must give: where the rights live in bothy's
 * own database (the grants table does), the drainer reads deliveries and rights in one statement.
 * A host that answers any other way leaves it out and never meets `Statement`.
 */
import { Context, Effect, Schema } from "effect"
import type { Statement } from "effect/sql"

/** The action a webhook subscription's owner needs on an event's space for it to be delivered. */
export const webhookDeliver = "webhook_out.deliver"

/** The action a push registration's principal needs on an event's space for its message to be sent. */
export const pushDeliver = "push.deliver"

export interface PermissionCheck {
  readonly principal: string
  readonly action: string
  readonly spaceId: string
}

/** The rights could not be checked (their store is down, the host's service refused, ...). */
export class PermissionsUnavailable extends Schema.TaggedError<PermissionsUnavailable>()("PermissionsUnavailable", {
  /** Who was asked, e.g. `permission_grants` or a host's service. */
  source: Schema.String,
  /** How many checks the failed call held; the first of them, to find it in the host's logs. */
  checks: Schema.Number,
  first: Schema.optional(Schema.Struct({ principal: Schema.String, action: Schema.String, spaceId: Schema.String })),
  /** What went wrong, in the store's words (e.g. PostgreSQL's message). */
  detail: Schema.String,
  cause: Schema.Defect(),
}) {
  override get message() {
    const first =
      this.first === undefined
        ? ""
        : ` (first: ${this.first.action} of ${this.first.principal} on ${this.first.spaceId})`
    return `cannot check ${this.checks} permission(s) with ${this.source}${first}: ${this.detail}`
  }
}

/** Wraps a store's failure for `checks` as `PermissionsUnavailable`; `detail` says it for an operator. */
export const permissionsUnavailable =
  <E>(
    source: string,
    checks: ReadonlyArray<PermissionCheck>,
    detail: (cause: E) => string = (cause) => (cause instanceof Error ? cause.message : String(cause)),
  ) =>
  (cause: E) =>
    new PermissionsUnavailable({
      source,
      checks: checks.length,
      ...(checks[0] === undefined
        ? {}
        : { first: { principal: checks[0].principal, action: checks[0].action, spaceId: checks[0].spaceId } }),
      detail: detail(cause),
      cause,
    })

/**
 * The rule as a boolean SQL expression, given SQL expressions for the principal and the space
 * (columns of the statement it goes into) and the action; it must answer as `allowed` would at
 * that statement's snapshot.
 */
export type PermissionsInSql = (
  expressions: { readonly principal: Statement.Fragment; readonly spaceId: Statement.Fragment },
  action: string,
) => Statement.Fragment

export interface PermissionsShape {
  readonly allowed: (
    principal: string,
    action: string,
    spaceId: string,
  ) => Effect.Effect<boolean, PermissionsUnavailable>
  /** One answer per check, in the same order. */
  readonly allowedEach: (
    checks: ReadonlyArray<PermissionCheck>,
  ) => Effect.Effect<ReadonlyArray<boolean>, PermissionsUnavailable>
  /** Optional: the same rule in SQL, for rights kept in bothy's database (see the header). */
  readonly inSql?: PermissionsInSql
}

export class Permissions extends Context.Service<Permissions, PermissionsShape>()("bothy/Permissions") {
  /** A `Permissions` from the single check; `allowedEach`, when not given, asks it once per check in turn. */
  static make(options: {
    readonly allowed: PermissionsShape["allowed"]
    readonly allowedEach?: PermissionsShape["allowedEach"]
    readonly inSql?: PermissionsInSql
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

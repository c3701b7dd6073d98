/**
 * The admin API's own refusals, beside the services' errors it passes on as they are (each mapped
 * to its status where `AdminApi` lists it): 400 names the field, 403 is for the operator-only
 * endpoints, 409 for a state that does not allow the change, 422 for a value that is well formed but
 * not acceptable, 413 for a body over the limit, 500 (with the request id the log line carries)
 * for a failure no client can act on.
 *
 * A principal asking for another's subscription or registration gets that resource's not-found
 * error (404), never a 403: whether it exists is not theirs to learn.
 */
import { Effect, Schema } from "effect"

/** A request that does not decode: `field` is its path (`payload.url`, `query.limit`). */
export class InvalidRequest extends Schema.TaggedError<InvalidRequest>()(
  "InvalidRequest",
  { field: Schema.String, detail: Schema.String },
  { httpApiStatus: 400 },
) {
  override get message() {
    return `invalid request${this.field === "" ? "" : ` at ${this.field}`}: ${this.detail}`
  }
}

/** Consumers and jobs span every tenant: only the operator sees them. */
export class OperatorOnly extends Schema.TaggedError<OperatorOnly>()(
  "OperatorOnly",
  { detail: Schema.String },
  { httpApiStatus: 403 },
) {
  override get message() {
    return `only the operator may do this: ${this.detail}`
  }
}

/** Push registrations need push on (its host allow-list checks every endpoint). */
export class PushOff extends Schema.TaggedError<PushOff>()(
  "PushOff",
  { detail: Schema.String },
  { httpApiStatus: 409 },
) {
  override get message() {
    return `push is off: ${this.detail}`
  }
}

/**
 * A principal's subscription may cover only spaces it may receive (`webhook_out.deliver` through
 * `Permissions`), and belongs to itself.
 */
export class NotPermitted extends Schema.TaggedError<NotPermitted>()(
  "NotPermitted",
  { field: Schema.String, detail: Schema.String },
  { httpApiStatus: 422 },
) {
  override get message() {
    return `not permitted at ${this.field}: ${this.detail}`
  }
}

/**
 * A request body over `admin.max_body_bytes` (`BOTHY_ADMIN_MAX_BODY_BYTES`): refused from its
 * `content-length` before any of it is read, or as soon as a body sent without one passes the limit.
 */
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()(
  "PayloadTooLarge",
  { limit: Schema.Int, detail: Schema.String },
  { httpApiStatus: 413 },
) {
  override get message() {
    return `request body too large: ${this.detail}`
  }
}

/**
 * A failure no client can act on (the database, a bug): the server logged it with `requestId`,
 * which is also the response's `x-request-id`, so an operator can find that line.
 */
export class InternalError extends Schema.TaggedError<InternalError>()(
  "InternalError",
  { requestId: Schema.String, detail: Schema.String },
  { httpApiStatus: 500 },
) {
  override get message() {
    return `internal error (request ${this.requestId}): ${this.detail}`
  }
}

/**
 * Failures no client can act on (the database, the permission store, the log's missing partition
 * that an operational event needs) become defects.
 */
export const unexpected = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.catchTags({
      SqlError: (e: unknown) => Effect.die(e),
      PermissionsUnavailable: (e: unknown) => Effect.die(e),
      EventLogPartitionMissing: (e: unknown) => Effect.die(e),
    } as never),
  ) as Effect.Effect<
    A,
    Exclude<E, { readonly _tag: "SqlError" | "PermissionsUnavailable" | "EventLogPartitionMissing" }>,
    R
  >

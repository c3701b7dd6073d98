/**
 * Bulk recovery over HTTP (`BulkRecovery`): a request answers 202 with the id of the job that
 * runs it, which is then how it is polled, paused and resumed. A principal recovers only its own
 * deliveries (the filter's owner is the caller) and sees only its own recoveries; another's is a
 * 404, as one that does not exist.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { UnsafeWebhookTarget } from "../outbound/OutboundTarget.ts"
import { RecoveryNotFound, recoveryStates } from "../webhooks/subscriptions/BulkRecovery.ts"
import { recoveryStates as deliveryStates, InvalidRecoveryFilter } from "../webhooks/subscriptions/RecoveryFilter.ts"
import {
  InvalidEndpointCredentials,
  InvalidSubscription,
  SubscriptionNotFound,
} from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { NotPermitted } from "./AdminErrors.ts"
import { Int8, Int8Id, Time } from "./AdminSchemas.ts"

/** A recovery's filter, as given and as it is stored (times as ISO text). */
const filterFields = {
  /** Deliveries of this owner's subscriptions; a principal caller may leave it out (it is the caller). */
  owner: Schema.optional(Schema.String),
  subscriptions: Schema.optional(Schema.Array(Schema.String)),
  /** Exact event types and patterns (`order.*`). */
  eventTypes: Schema.optional(Schema.Array(Schema.String)),
  /** `failed` (the default), `dead`, `delivered`; a replay also `pending` (and takes every state by default). */
  states: Schema.optional(Schema.Array(Schema.String)),
  /** Deliveries created at or after this time. */
  since: Schema.optional(Schema.Date),
  /** Deliveries created before this time. */
  until: Schema.optional(Schema.Date),
  /** Needed when no other selector is given: every delivery of every subscription. */
  all: Schema.optional(Schema.Boolean),
}

export const RecoveryRequest = Schema.Struct({
  ...filterFields,
  /** Copy the one subscription's range to a new subscription at this URL instead of re-sending. */
  replayTo: Schema.optional(Schema.Struct({ url: Schema.String })),
  /** Deliveries per transaction (1 to 10000, default 500). */
  batchSize: Schema.optional(Schema.Int),
})

export const RecoveryAccepted = Schema.Struct({
  /** The `webhook.bulk-recover` job: poll `GET /v1/recoveries/{job}`. */
  job: Int8,
  /** Deliveries the filter selected when asked. */
  total: Schema.Int,
  /** A replay's new subscription and its signing secret, shown this once. */
  replay: Schema.NullOr(Schema.Struct({ subscription: Schema.String, secret: Schema.String })),
}).annotate({ identifier: "RecoveryAccepted" })

export const Recovery = Schema.Struct({
  job: Int8,
  /** The job running it now (a resume may have needed a new one). */
  currentJob: Int8,
  owner: Schema.NullOr(Schema.String),
  filter: Schema.Struct({
    owner: Schema.NullOr(Schema.String),
    subscriptions: Schema.Array(Schema.String),
    eventTypes: Schema.Array(Schema.String),
    states: Schema.Array(Schema.Literals(deliveryStates)),
    since: Schema.NullOr(Schema.String),
    until: Schema.NullOr(Schema.String),
    all: Schema.Boolean,
  }),
  replayTo: Schema.NullOr(Schema.String),
  state: Schema.Literals(recoveryStates),
  total: Schema.Int,
  examined: Schema.Int,
  resent: Schema.Int,
  skipped: Schema.Int,
  createdAt: Time,
  updatedAt: Time,
  finishedAt: Schema.NullOr(Time),
}).annotate({ identifier: "Recovery" })

const NoRecovery = RecoveryNotFound.pipe(HttpApiSchema.status(404))
const BadFilter = InvalidRecoveryFilter.pipe(HttpApiSchema.status(400))
const jobParam = { id: Int8Id }

export class RecoveriesApi extends HttpApiGroup.make("recoveries")
  .add(
    HttpApiEndpoint.post("create", "/", {
      payload: RecoveryRequest,
      success: RecoveryAccepted.pipe(HttpApiSchema.status(202)),
      error: [
        BadFilter,
        SubscriptionNotFound.pipe(HttpApiSchema.status(404)),
        InvalidSubscription.pipe(HttpApiSchema.status(400)),
        InvalidEndpointCredentials.pipe(HttpApiSchema.status(400)),
        UnsafeWebhookTarget.pipe(HttpApiSchema.status(422)),
        NotPermitted,
      ],
    }),
    HttpApiEndpoint.get("get", "/:id", { params: jobParam, success: Recovery, error: NoRecovery }),
    /** Its job ends after the batch in hand; the cursor stays. */
    HttpApiEndpoint.post("pause", "/:id/pause", { params: jobParam, success: Recovery, error: NoRecovery }),
    /** Goes on from its cursor. */
    HttpApiEndpoint.post("resume", "/:id/resume", { params: jobParam, success: Recovery, error: NoRecovery }),
  )
  .prefix("/v1/recoveries")
  .annotateMerge(
    OpenApi.annotations({
      title: "recoveries",
      description:
        "Bulk recovery: re-send the deliveries a filter selects across subscriptions, or replay one subscription's range to a new URL, as a job whose progress is polled",
    }),
  ) {}

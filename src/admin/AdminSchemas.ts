/**
 * What the admin API sends and takes, as `Schema`s: the HttpApi endpoints (`AdminApi`) and the
 * CLI's `--json` output both encode with these, so the two print the same shapes.
 *
 * Ids travel as strings, and so do seqs and other int8 values (they may pass 2^53); times are ISO
 * 8601 strings. The types are the services' own records (`WebhookSubscriptions.Subscription`,
 * `WebhookDeliveries.DeliveryRecord`, ...), so a handler returns what the service gave it.
 */
import { Schema } from "effect"
import { jobStates } from "../jobs/JobControl.ts"
import { testEventType } from "../log/TestEvent.ts"
import { Uuid } from "../platform/Uuid.ts"
import type { RetryNow } from "../webhooks/subscriptions/SubscriptionRetry.ts"
import { deliveryStates } from "../webhooks/subscriptions/WebhookDeliveries.ts"

/** A payload filter as JSON; `WebhookSubscriptions` checks it (a 400 naming its path). */
export const PayloadFilterJson = Schema.Json.annotate({
  description:
    'A payload filter: {"and": [...]}, {"or": [...]}, {"not": ...}, or {"path": "$.a.b", <op>: value} with op one of eq, in, exists, gt, gte, lt, lte, startsWith',
})

/** An int8 as a decimal string. */
export const Int8 = Schema.BigInt.annotate({ description: "A 64-bit integer, as a decimal string" })
export const Time = Schema.Date.annotate({ description: "ISO 8601 time" })

export const Subscription = Schema.Struct({
  id: Schema.String,
  owner: Schema.String,
  url: Schema.String,
  eventTypes: Schema.Array(Schema.String),
  scope: Schema.Array(Schema.String),
  state: Schema.Literals(["active", "disabled"]),
  disabledCause: Schema.NullOr(Schema.Literals(["gap", "gone", "failing", "manual"])),
  /** Since when more of its attempts fail over the window than the threshold allows; null: healthy. It still delivers. */
  degradedSince: Schema.NullOr(Time),
  startedSeq: Int8,
  lastDeliveredSeq: Int8,
  /** The last `sequence` a delivery took. */
  lastSequence: Int8,
  rateLimit: Schema.NullOr(Schema.Finite),
  headers: Schema.Record(Schema.String, Schema.String),
  /** The payload filter (docs/webhooks.md, "Payload filters"); null: every payload. */
  filter: Schema.NullOr(PayloadFilterJson),
  /** OAuth2 client credentials, shown without the client secret; null: none. */
  auth: Schema.NullOr(
    Schema.Struct({
      type: Schema.Literal("oauth2"),
      tokenUrl: Schema.String,
      clientId: Schema.String,
      scope: Schema.NullOr(Schema.String),
    }),
  ),
  /** Whether a client certificate is presented (it and its key are never shown). */
  mtls: Schema.Boolean,
  /** Whether a custom CA is trusted for the endpoint instead of the system's. */
  ca: Schema.Boolean,
}).annotate({ identifier: "Subscription" })

/** Endpoint credentials as a create or update takes them; each is checked, stored sealed and never shown again. */
export const EndpointCredentialFields = {
  /** OAuth2 client credentials; null removes them. */
  auth: Schema.optional(
    Schema.NullOr(
      Schema.Struct({
        type: Schema.Literal("oauth2"),
        tokenUrl: Schema.String,
        clientId: Schema.String,
        clientSecret: Schema.RedactedFromValue(Schema.String),
        scope: Schema.optional(Schema.String),
      }).annotate({ identifier: "OAuthClientCredentials" }),
    ),
  ),
  /** A client certificate (PEM, chain allowed) and its unencrypted key (PEM); null removes them. */
  mtls: Schema.optional(
    Schema.NullOr(
      Schema.Struct({ cert: Schema.String, key: Schema.RedactedFromValue(Schema.String) }).annotate({
        identifier: "ClientCertificate",
      }),
    ),
  ),
  /** CA certificates (PEM) trusted for the endpoint instead of the system's; null removes them. */
  ca: Schema.optional(Schema.NullOr(Schema.String)),
}

export const CreatedSubscription = Schema.Struct({
  subscription: Subscription,
  /** The signing secret (`whsec_...`): shown here once, never again. */
  secret: Schema.String,
}).annotate({ identifier: "CreatedSubscription" })

/** A page of `item`s and the cursor of the next one (`null` after the last). */
const page = <S extends Schema.Top, C extends Schema.Top>(identifier: string, item: S, cursor: C) =>
  Schema.Struct({ items: Schema.Array(item), next: Schema.NullOr(cursor) }).annotate({ identifier })

/** The next page's cursor goes in `after`. */
export const SubscriptionPage = page("SubscriptionPage", Subscription, Schema.String)

export const Enabled = Schema.Struct({
  /** False when it was active already (nothing changed). */
  enabled: Schema.Boolean,
  /** It receives the events after this seq. */
  after: Schema.NullOr(Int8),
  /** Deliveries created or made pending again for events the consumer had read already. */
  deliveries: Schema.Int,
}).annotate({ identifier: "Enabled" })

export const TestEventSent = Schema.Struct({
  /** The test event's seq in the log; its delivery follows what is pending for the subscription. */
  seq: Int8,
  /** The space it was committed in: the lowest of the subscription's scope. */
  space: Schema.String,
  type: Schema.Literal(testEventType),
}).annotate({ identifier: "TestEventSent" })

export const RotatedSecret = Schema.Struct({
  /** The new secret, shown once; the old one keeps signing for 24 hours. */
  secret: Schema.String,
}).annotate({ identifier: "RotatedSecret" })

export const Retried = Schema.Struct({
  /**
   * `resumed`: the drainer runs now, from the delivery that failed; `running`: it runs already;
   * `nothing_pending`: nothing waits; `disabled`: enable the subscription first.
   */
  outcome: Schema.Literals(["resumed", "running", "nothing_pending", "disabled"]),
  /** The drain job (its id), when there is one. */
  job: Schema.NullOr(Int8),
  /** Deliveries waiting. */
  pending: Schema.Int,
}).annotate({ identifier: "Retried" })

/** The answer to a retry, from what `WebhookSubscriptions.retryNow` did. */
export const retried = (done: RetryNow): typeof Retried.Type =>
  done._tag === "Resumed"
    ? { outcome: "resumed", job: done.job, pending: done.pending }
    : done._tag === "Running"
      ? { outcome: "running", job: done.job, pending: done.pending }
      : { outcome: done._tag === "Disabled" ? "disabled" : "nothing_pending", job: null, pending: 0 }

export const Delivery = Schema.Struct({
  id: Int8,
  subscriptionId: Schema.String,
  eventSeq: Int8,
  eventType: Schema.NullOr(Schema.String),
  space: Schema.NullOr(Schema.String),
  epoch: Schema.Int,
  sequence: Schema.NullOr(Int8),
  state: Schema.Literals(deliveryStates),
  deadReason: Schema.NullOr(Schema.String),
  attempts: Schema.Int,
  lastStatus: Schema.NullOr(Schema.Int),
  lastErrorClass: Schema.NullOr(Schema.String),
  lastAttemptAt: Schema.NullOr(Time),
  createdAt: Time,
  finishedAt: Schema.NullOr(Time),
}).annotate({ identifier: "Delivery" })

export const Attempt = Schema.Struct({
  number: Schema.Int,
  startedAt: Time,
  durationMs: Schema.Int,
  status: Schema.NullOr(Schema.Int),
  errorClass: Schema.NullOr(Schema.String),
  responseBody: Schema.NullOr(Schema.String),
  responseTruncated: Schema.Boolean,
}).annotate({ identifier: "Attempt" })

export const DeliveryWithAttempts = Schema.Struct({
  delivery: Delivery,
  attempts: Schema.Array(Attempt),
}).annotate({ identifier: "DeliveryWithAttempts" })

/** The next page's cursor goes in `before`. */
export const DeliveryPage = page("DeliveryPage", Delivery, Int8)

export const RecoveryStarted = Schema.Struct({
  /** The `webhook.recover` job that re-sends them (see the jobs endpoints). */
  job: Int8,
}).annotate({ identifier: "RecoveryStarted" })

export const Registration = Schema.Struct({
  id: Schema.String,
  principal: Schema.String,
  kind: Schema.Literals(["webpush", "apns", "fcm"]),
  /** A browser's push endpoint; null for a native device. */
  endpoint: Schema.NullOr(Schema.String),
  /** A native device's token (APNs device token, FCM registration token); null for a browser. */
  token: Schema.NullOr(Schema.String),
  /** An APNs device's bundle id. */
  topic: Schema.NullOr(Schema.String),
  /** An APNs device's environment: sandbox or production. */
  environment: Schema.NullOr(Schema.Literals(["sandbox", "production"])),
  createdAt: Time,
  refreshedAt: Time,
}).annotate({ identifier: "Registration" })

export const Registered = Schema.Struct({
  id: Schema.String,
  /** False when the endpoint was registered already and this refreshed it. */
  created: Schema.Boolean,
}).annotate({ identifier: "Registered" })

/** What a browser's `PushSubscription.toJSON()` gives. */
export const PushSubscriptionJson = Schema.Struct({
  endpoint: Schema.String,
  expirationTime: Schema.optional(Schema.NullOr(Schema.Finite)),
  keys: Schema.Struct({ p256dh: Schema.String, auth: Schema.String }),
}).annotate({ identifier: "PushSubscriptionJSON" })

/** An iOS app's device, for APNs. */
export const ApnsDevice = Schema.Struct({
  token: Schema.String,
  /** The app's bundle id. */
  topic: Schema.String,
  /** `sandbox` (a development build) or `production`. */
  environment: Schema.String,
}).annotate({ identifier: "ApnsDevice" })

/** An Android (or other Firebase) app's registration token, for FCM. */
export const FcmDevice = Schema.Struct({ token: Schema.String }).annotate({ identifier: "FcmDevice" })

export const Consumer = Schema.Struct({
  name: Schema.String,
  lastSeq: Int8,
  head: Int8,
  lag: Schema.Finite,
  /** Seconds since the oldest event it has not processed was committed; 0 when caught up. */
  pendingAgeSeconds: Schema.Finite,
  updatedAt: Time,
}).annotate({ identifier: "Consumer" })

export const JobCount = Schema.Struct({
  state: Schema.String,
  kind: Schema.String,
  count: Schema.Int,
  oldestSeconds: Schema.Finite,
}).annotate({ identifier: "JobCount" })

export const JobState = Schema.Literals(jobStates)

export const Job = Schema.Struct({
  id: Int8,
  kind: Schema.String,
  queue: Schema.String,
  state: JobState,
  attempt: Schema.Int,
  maxAttempts: Schema.Int,
  priority: Schema.Int,
  args: Schema.Json,
  errors: Schema.Json,
  createdAt: Time,
  scheduledAt: Time,
  attemptedAt: Schema.NullOr(Time),
  finalizedAt: Schema.NullOr(Time),
}).annotate({ identifier: "Job" })

/** The next page's cursor goes in `before`. */
export const JobPage = page("JobPage", Job, Int8)

/** The largest int8, the last id or seq PostgreSQL can hold. */
export const maxInt8 = 2n ** 63n - 1n

/**
 * An id or cursor of an int8 column in a path or query (`/deliveries/{id}`, `?before=`): 1 to
 * 2^63-1. Anything else, a word or a number past the column's range, is a 400 naming the
 * parameter, decided before any SQL runs.
 */
export const Int8Id = Schema.BigInt.check(
  Schema.isBetweenBigInt(
    { minimum: 1n, maximum: maxInt8 },
    { message: `expected a whole number from 1 to ${maxInt8}` },
  ),
)

/** A seq in a query (`?fromSeq=`): 0 to 2^63-1, else a 400 naming the parameter. */
export const SeqParam = Schema.BigInt.check(
  Schema.isBetweenBigInt(
    { minimum: 0n, maximum: maxInt8 },
    { message: `expected a whole number from 0 to ${maxInt8}` },
  ),
)

/** A subscription's id (or the `after` cursor): a UUID, else a 400 naming the parameter. */
export const UuidId = Uuid

/** A page size: 1 to 500, 50 when absent. */
export const Limit = Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 500 })))
export const defaultLimit = 50

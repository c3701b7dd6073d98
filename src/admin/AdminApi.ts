/**
 * The admin HTTP API as an `HttpApi`: its groups (subscriptions, deliveries, recoveries, feed, registrations,
 * consumers, jobs, access), each endpoint's path, inputs, answer and errors with their statuses. The
 * handlers are in `AdminHandlers`, the server in `AdminServer`; this module is what a client (or
 * the OpenAPI document at `/openapi.json`) is generated from.
 *
 * Every endpoint runs behind `AdminAuthorization` (a 401 without a caller), `RequestErrors`,
 * which turns an input that does not decode into an `InvalidRequest` naming the field instead of
 * an empty 400, and `AdminRequests`' `RequestBodies` (413 over the body limit) and `Unexpected`
 * (a defect is a logged 500 with the request id). One rule for every input: a body with a field the
 * endpoint does not declare, an id that is malformed or past its column's range, a cursor or
 * page size that is not one, are all a 400 `InvalidRequest` naming the field or parameter
 * (`payload.eventType`, `params.id`, `query.after`), decided before any SQL runs; a well-formed id
 * that names nothing (or another's) is a 404. The document also describes what receivers get, under OpenAPI 3.1 `webhooks`
 * (`ReceiverWebhooks`).
 */
import { Effect, Schema } from "effect"
import {
  HttpApi,
  HttpApiEndpoint,
  type HttpApiError,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  OpenApi,
} from "effect/http-api"
import { JobNotFound, JobStateConflict } from "../jobs/JobControl.ts"
import { UnsafeWebhookTarget } from "../outbound/OutboundTarget.ts"
import { firstIssue } from "../platform/FieldIssue.ts"
import { InvalidPushRegistration } from "../push/PushRegistration.ts"
import { RegistrationNotFound } from "../push/PushRegistrations.ts"
import { ResendRefused } from "../webhooks/subscriptions/DeliveryResend.ts"
import { TestEventNeedsScope } from "../webhooks/subscriptions/SubscriptionTestEvent.ts"
import { DeliveryNotFound, deliveryStates } from "../webhooks/subscriptions/WebhookDeliveries.ts"
import {
  InvalidEndpointCredentials,
  InvalidSubscription,
  SeqNotInLog,
  SubscriptionNotFound,
} from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { AccessApi } from "./AccessApi.ts"
import { AdminAuthorization } from "./AdminAuth.ts"
import { InvalidRequest, NotPermitted, OperatorOnly, PushOff } from "./AdminErrors.ts"
import { RequestBodies, Unexpected } from "./AdminRequests.ts"
import * as S from "./AdminSchemas.ts"
import { EventTypesApi } from "./EventTypesApi.ts"
import { FeedApi } from "./FeedApi.ts"
import { PortalLinksApi } from "./PortalLinksApi.ts"
import * as ReceiverWebhooks from "./ReceiverWebhooks.ts"
import { RecoveriesApi } from "./RecoveriesApi.ts"

/** Renders request decoding failures as `InvalidRequest`; a response that does not encode stays a 500. */
export class RequestErrors extends HttpApiMiddleware.Service<RequestErrors>()("bothy/admin/RequestErrors", {
  error: InvalidRequest,
}) {}

export const requestErrorsLayer = HttpApiMiddleware.layerSchemaErrorTransform(
  RequestErrors,
  (error: HttpApiError.HttpApiSchemaError) =>
    error.kind === "Body" || error.kind === "ResponseHeaders"
      ? Effect.fail(error)
      : Effect.fail(new InvalidRequest(firstIssue(error.cause, error.kind.toLowerCase()))),
)

const NoSubscription = SubscriptionNotFound.pipe(HttpApiSchema.status(404))
const NoDelivery = DeliveryNotFound.pipe(HttpApiSchema.status(404))
const NoRegistration = RegistrationNotFound.pipe(HttpApiSchema.status(404))
const NoJob = JobNotFound.pipe(HttpApiSchema.status(404))
const BadSubscription = InvalidSubscription.pipe(HttpApiSchema.status(400))
const BadCredentials = InvalidEndpointCredentials.pipe(HttpApiSchema.status(400))
const BadRegistration = InvalidPushRegistration.pipe(HttpApiSchema.status(400))
const UnsafeTarget = UnsafeWebhookTarget.pipe(HttpApiSchema.status(422))
const SeqGone = SeqNotInLog.pipe(HttpApiSchema.status(422))
const Refused = ResendRefused.pipe(HttpApiSchema.status(409))
const JobConflict = JobStateConflict.pipe(HttpApiSchema.status(409))
const NoScope = TestEventNeedsScope.pipe(HttpApiSchema.status(409))

/** A subscription's id in the path: a UUID (anything else is a 400 naming `params.id`). */
const idParam = { id: S.UuidId }
/** An int8 id in the path: 1 to 2^63-1 (anything else is a 400 naming `params.id`). */
const int8IdParam = { id: S.Int8Id }

/** What a create or update takes; `WebhookSubscriptions` checks the values (400 naming the field). */
const subscriptionFields = {
  url: Schema.String,
  eventTypes: Schema.optional(Schema.Array(Schema.String)),
  scope: Schema.Array(Schema.String),
  rateLimit: Schema.optional(Schema.NullOr(Schema.Finite)),
  headers: Schema.optional(Schema.Record(Schema.String, Schema.String)),
  filter: Schema.optional(Schema.NullOr(S.PayloadFilterJson)),
  ...S.EndpointCredentialFields,
}

export class SubscriptionsApi extends HttpApiGroup.make("subscriptions")
  .add(
    HttpApiEndpoint.post("create", "/", {
      payload: Schema.Struct({
        /** The owner principal; a principal caller may leave it out (it is the caller). */
        owner: Schema.optional(Schema.String),
        ...subscriptionFields,
      }),
      success: S.CreatedSubscription.pipe(HttpApiSchema.status(201)),
      error: [BadSubscription, BadCredentials, UnsafeTarget, NotPermitted],
    }),
    HttpApiEndpoint.get("list", "/", {
      query: {
        owner: Schema.optional(Schema.String),
        state: Schema.optional(Schema.Literals(["active", "disabled"])),
        after: Schema.optional(S.UuidId),
        limit: S.Limit,
      },
      success: S.SubscriptionPage,
    }),
    HttpApiEndpoint.get("get", "/:id", { params: idParam, success: S.Subscription, error: NoSubscription }),
    HttpApiEndpoint.patch("update", "/:id", {
      params: idParam,
      payload: Schema.Struct({
        url: Schema.optional(subscriptionFields.url),
        eventTypes: subscriptionFields.eventTypes,
        scope: Schema.optional(subscriptionFields.scope),
        rateLimit: subscriptionFields.rateLimit,
        headers: subscriptionFields.headers,
        filter: subscriptionFields.filter,
        auth: subscriptionFields.auth,
        mtls: subscriptionFields.mtls,
        ca: subscriptionFields.ca,
      }),
      success: S.Subscription,
      error: [NoSubscription, BadSubscription, BadCredentials, UnsafeTarget, NotPermitted],
    }),
    HttpApiEndpoint.post("disable", "/:id/disable", {
      params: idParam,
      success: S.Subscription,
      error: NoSubscription,
    }),
    HttpApiEndpoint.post("enable", "/:id/enable", {
      params: idParam,
      /** From the head without `fromSeq`; from that seq (still in the log) with it. */
      query: { fromSeq: Schema.optional(S.SeqParam) },
      success: S.Enabled,
      error: [NoSubscription, SeqGone],
    }),
    HttpApiEndpoint.post("rotateSecret", "/:id/rotate-secret", {
      params: idParam,
      success: S.RotatedSecret,
      error: NoSubscription,
    }),
    /** Its pending deliveries resume now instead of at the end of the retry delay. */
    HttpApiEndpoint.post("retry", "/:id/retry", {
      params: idParam,
      success: S.Retried,
      error: NoSubscription,
    }),
    /** Appends a `bothy.subscription.test` event that only this subscription receives. */
    HttpApiEndpoint.post("sendTestEvent", "/:id/test-event", {
      params: idParam,
      success: S.TestEventSent.pipe(HttpApiSchema.status(202)),
      error: [NoSubscription, NoScope],
    }),
    HttpApiEndpoint.delete("remove", "/:id", { params: idParam, error: NoSubscription }),
  )
  .prefix("/v1/subscriptions")
  .annotateMerge(
    OpenApi.annotations({
      title: "subscriptions",
      description:
        "Webhook subscriptions: the signing secret is shown once, at creation and rotation; endpoint credentials (OAuth2 client secret, client key) never",
    }),
  ) {}

export class DeliveriesApi extends HttpApiGroup.make("deliveries")
  .add(
    HttpApiEndpoint.get("list", "/subscriptions/:id/deliveries", {
      params: idParam,
      query: {
        state: Schema.optional(Schema.Literals(deliveryStates)),
        /** Created at or after this time. */
        since: Schema.optional(Schema.Date),
        /** Created before this time. */
        until: Schema.optional(Schema.Date),
        before: Schema.optional(S.Int8Id),
        limit: S.Limit,
      },
      success: S.DeliveryPage,
      error: NoSubscription,
    }),
    HttpApiEndpoint.get("get", "/deliveries/:id", {
      params: int8IdParam,
      success: S.DeliveryWithAttempts,
      error: NoDelivery,
    }),
    HttpApiEndpoint.post("resend", "/deliveries/:id/resend", {
      params: int8IdParam,
      success: S.Delivery.pipe(HttpApiSchema.status(202)),
      error: [NoDelivery, Refused],
    }),
    HttpApiEndpoint.post("recover", "/subscriptions/:id/recover", {
      params: idParam,
      payload: Schema.Struct({ since: Schema.Date }),
      success: S.RecoveryStarted.pipe(HttpApiSchema.status(202)),
      error: [NoSubscription, Refused],
    }),
  )
  .prefix("/v1")
  .annotateMerge(
    OpenApi.annotations({
      title: "deliveries",
      description: "Webhook deliveries and their attempts; re-send one, or recover the failed ones since a time",
    }),
  ) {}

export class RegistrationsApi extends HttpApiGroup.make("registrations")
  .add(
    HttpApiEndpoint.post("create", "/", {
      payload: Schema.Struct({
        /** The principal; a principal caller may leave it out (it is the caller). */
        principal: Schema.optional(Schema.String),
        /** A browser's subscription; or, exactly one instead of it, `apns` or `fcm`. */
        subscription: Schema.optional(S.PushSubscriptionJson),
        apns: Schema.optional(S.ApnsDevice),
        fcm: Schema.optional(S.FcmDevice),
      }),
      success: S.Registered.pipe(HttpApiSchema.status(201)),
      error: [BadRegistration, NotPermitted, PushOff],
    }),
    HttpApiEndpoint.get("list", "/", {
      query: { principal: Schema.optional(Schema.String) },
      success: Schema.Array(S.Registration),
      error: InvalidRequest,
    }),
    HttpApiEndpoint.delete("remove", "/:id", { params: int8IdParam, error: NoRegistration }),
  )
  .prefix("/v1/registrations")
  .annotateMerge(
    OpenApi.annotations({
      title: "registrations",
      description: "Push registrations: browsers (Web Push) and native devices (APNs, FCM)",
    }),
  ) {}

export class ConsumersApi extends HttpApiGroup.make("consumers")
  .add(HttpApiEndpoint.get("list", "/", { success: Schema.Array(S.Consumer), error: OperatorOnly }))
  .prefix("/v1/consumers")
  .annotateMerge(OpenApi.annotations({ title: "consumers", description: "Each consumer's position and lag" })) {}

export class JobsApi extends HttpApiGroup.make("jobs")
  .add(
    HttpApiEndpoint.get("counts", "/counts", { success: Schema.Array(S.JobCount), error: OperatorOnly }),
    HttpApiEndpoint.get("list", "/", {
      query: {
        state: Schema.optional(S.JobState),
        kind: Schema.optional(Schema.String),
        before: Schema.optional(S.Int8Id),
        limit: S.Limit,
      },
      success: S.JobPage,
      error: OperatorOnly,
    }),
    HttpApiEndpoint.post("retry", "/:id/retry", {
      params: int8IdParam,
      success: S.Job,
      error: [NoJob, JobConflict, OperatorOnly],
    }),
    HttpApiEndpoint.post("cancel", "/:id/cancel", {
      params: int8IdParam,
      success: S.Job,
      error: [NoJob, JobConflict, OperatorOnly],
    }),
  )
  .prefix("/v1/jobs")
  .annotateMerge(OpenApi.annotations({ title: "jobs", description: "Jobs by state and kind; retry or cancel one" })) {}

export class AdminApi extends HttpApi.make("bothy-admin")
  .add(SubscriptionsApi)
  .add(DeliveriesApi)
  .add(RecoveriesApi)
  .add(FeedApi)
  .add(RegistrationsApi)
  .add(ConsumersApi)
  .add(JobsApi)
  .add(AccessApi)
  .add(EventTypesApi)
  .add(PortalLinksApi)
  .middleware(RequestErrors)
  .middleware(RequestBodies)
  .middleware(AdminAuthorization)
  .middleware(Unexpected)
  // A body's fields are exactly the declared ones: a typo (`eventType` for `eventTypes`) is a 400
  // naming it, never a request that silently means something else. The document says the same
  // (`additionalProperties: false`). All of them are named, not only the first.
  .annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error", errors: "all" })
  .annotateMerge(
    OpenApi.annotations({
      title: "bothy admin API",
      version: "1",
      description:
        "Manage webhook subscriptions, deliveries, push registrations and jobs. `webhooks` describes the requests receivers get.",
      transform: ReceiverWebhooks.addTo,
    }),
  ) {}

/**
 * The admin API's handlers: each one checks the caller (`AdminAccess`) and calls the service that
 * owns the data (`WebhookSubscriptions`, `WebhookDeliveries`, `DeliveryResend`, `PushRegistrations`,
 * `JobControl`, `Status`), the same services the CLI calls. No SQL lives here.
 *
 * A database failure is a defect here (a 500), never an answer a client could act on.
 */
import { Effect, Layer, Option, Redacted } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { SqlClient } from "effect/sql"
import * as JobControl from "../jobs/JobControl.ts"
import * as Status from "../ops/Status.ts"
import { PushConfig } from "../push/PushConfig.ts"
import { InvalidPushRegistration } from "../push/PushRegistration.ts"
import * as PushRegistrations from "../push/PushRegistrations.ts"
import * as DeliveryResend from "../webhooks/subscriptions/DeliveryResend.ts"
import * as WebhookDeliveries from "../webhooks/subscriptions/WebhookDeliveries.ts"
import { SubscriptionNotFound, WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { access } from "./AccessHandlers.ts"
import * as AdminAccess from "./AdminAccess.ts"
import { AdminApi } from "./AdminApi.ts"
import { CurrentCaller } from "./AdminAuth.ts"
import { InvalidRequest, PushOff, unexpected } from "./AdminErrors.ts"
import { defaultLimit, retried } from "./AdminSchemas.ts"
import { eventTypes } from "./EventTypesHandlers.ts"
import { feed } from "./FeedHandlers.ts"
import { portalLinks } from "./PortalLinksHandlers.ts"
import { recoveries } from "./RecoveriesHandlers.ts"

const subscriptions = HttpApiBuilder.group(AdminApi, "subscriptions", (handlers) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    const sql = yield* SqlClient.SqlClient
    const own = (id: string) =>
      Effect.flatMap(CurrentCaller, (caller) => AdminAccess.subscription(webhooks, caller, id))
    const withSql = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provideService(effect, SqlClient.SqlClient, sql)
    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function* () {
          const caller = yield* CurrentCaller
          const owner = yield* AdminAccess.ownerFor(caller, payload.owner, "owner")
          yield* withSql(AdminAccess.checkScope(caller, payload.scope))
          const { id, secret } = yield* webhooks.create({ ...payload, owner, eventTypes: payload.eventTypes ?? [] })
          return { subscription: yield* Effect.orDie(webhooks.get(id)), secret: Redacted.value(secret) }
        }).pipe(unexpected),
      )
      .handle("list", ({ query }) =>
        Effect.gen(function* () {
          const caller = yield* CurrentCaller
          if (caller._tag === "Principal" && query.owner !== undefined && query.owner !== caller.principal) {
            return { items: [], next: null }
          }
          const page = yield* webhooks.list({
            owner: caller._tag === "Principal" ? caller.principal : query.owner,
            state: query.state,
            after: query.after,
            limit: query.limit ?? defaultLimit,
          })
          return { items: page.subscriptions, next: page.next }
        }).pipe(unexpected),
      )
      .handle("get", ({ params }) => own(params.id).pipe(unexpected))
      .handle("update", ({ params, payload }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          yield* withSql(AdminAccess.checkScope(yield* CurrentCaller, payload.scope))
          return yield* webhooks.update(params.id, payload)
        }).pipe(unexpected),
      )
      .handle("disable", ({ params }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          yield* webhooks.disable(params.id)
          return yield* webhooks.get(params.id)
        }).pipe(unexpected),
      )
      .handle("enable", ({ params, query }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          const resumed = yield* webhooks.enable(
            params.id,
            query.fromSeq === undefined ? undefined : { fromSeq: query.fromSeq },
          )
          return resumed._tag === "Enabled"
            ? { enabled: true, after: resumed.after, deliveries: resumed.deliveries }
            : { enabled: false, after: null, deliveries: 0 }
        }).pipe(unexpected),
      )
      .handle("rotateSecret", ({ params }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          return { secret: Redacted.value(yield* webhooks.rotateSecret(params.id)) }
        }).pipe(unexpected),
      )
      .handle("retry", ({ params }) =>
        Effect.andThen(own(params.id), webhooks.retryNow(params.id)).pipe(Effect.map(retried), unexpected),
      )
      .handle("sendTestEvent", ({ params }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          const caller = yield* CurrentCaller
          return yield* webhooks.sendTestEvent(params.id, caller._tag === "Principal" ? caller.principal : "operator")
        }).pipe(unexpected),
      )
      .handle("remove", ({ params }) => Effect.andThen(own(params.id), webhooks.remove(params.id)).pipe(unexpected))
  }),
)

const deliveries = HttpApiBuilder.group(AdminApi, "deliveries", (handlers) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    const sql = yield* SqlClient.SqlClient
    const withSql = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provideService(effect, SqlClient.SqlClient, sql)
    const own = (id: string) =>
      Effect.flatMap(CurrentCaller, (caller) => AdminAccess.subscription(webhooks, caller, id))
    /** The delivery, if its subscription is the caller's; another's is `DeliveryNotFound`. */
    const ownDelivery = (id: bigint) =>
      Effect.gen(function* () {
        const found = yield* withSql(WebhookDeliveries.get(id))
        yield* own(found.delivery.subscriptionId).pipe(
          Effect.catchTag("SubscriptionNotFound", () =>
            Effect.fail(new WebhookDeliveries.DeliveryNotFound({ id: String(id) })),
          ),
        )
        return found
      })
    return handlers
      .handle("list", ({ params, query }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          const page = yield* withSql(
            WebhookDeliveries.list({
              subscriptionId: params.id,
              state: query.state,
              since: query.since,
              until: query.until,
              before: query.before,
              limit: query.limit ?? defaultLimit,
            }),
          )
          return { items: page.deliveries, next: page.next }
        }).pipe(unexpected),
      )
      .handle("get", ({ params }) => ownDelivery(params.id).pipe(unexpected))
      .handle("resend", ({ params }) =>
        Effect.gen(function* () {
          yield* ownDelivery(params.id)
          if (!(yield* withSql(DeliveryResend.resend(params.id)))) {
            return yield* new WebhookDeliveries.DeliveryNotFound({ id: String(params.id) })
          }
          return (yield* withSql(WebhookDeliveries.get(params.id))).delivery
        }).pipe(unexpected),
      )
      .handle("recover", ({ params, payload }) =>
        Effect.gen(function* () {
          yield* own(params.id)
          const job = yield* withSql(DeliveryResend.requestRecovery(params.id, payload.since))
          if (job === undefined) return yield* new SubscriptionNotFound({ id: params.id })
          return { job }
        }).pipe(unexpected),
      )
  }),
)

const registrations = HttpApiBuilder.group(AdminApi, "registrations", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const push = yield* Effect.serviceOption(PushConfig)
    const withSql = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provideService(effect, SqlClient.SqlClient, sql)
    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function* () {
          const caller = yield* CurrentCaller
          const principal = yield* AdminAccess.ownerFor(caller, payload.principal, "principal")
          const given = (["subscription", "apns", "fcm"] as const).filter((k) => payload[k] !== undefined)
          if (given.length !== 1) {
            return yield* new InvalidPushRegistration({
              field: "",
              reason: "BadShape",
              detail: `give exactly one of subscription, apns, fcm (got ${given.length === 0 ? "none" : given.join(", ")})`,
            })
          }
          if (payload.apns !== undefined)
            return yield* withSql(PushRegistrations.registerNative(principal, "apns", payload.apns))
          if (payload.fcm !== undefined)
            return yield* withSql(PushRegistrations.registerNative(principal, "fcm", payload.fcm))
          if (Option.isNone(push)) {
            return yield* new PushOff({ detail: "set the VAPID keys (bothy push keys) to register browsers" })
          }
          return yield* withSql(PushRegistrations.register(principal, payload.subscription!)).pipe(
            Effect.provideService(PushConfig, push.value),
          )
        }).pipe(unexpected),
      )
      .handle("list", ({ query }) =>
        Effect.gen(function* () {
          const caller = yield* CurrentCaller
          if (caller._tag === "Principal") {
            // Another's are none of the caller's business: none, as for a principal without any.
            if (query.principal !== undefined && query.principal !== caller.principal) return []
            return yield* withSql(PushRegistrations.list(caller.principal))
          }
          if (query.principal === undefined) {
            return yield* new InvalidRequest({
              field: "query.principal",
              detail: "name the principal whose registrations to list",
            })
          }
          const principal = query.principal
          return yield* withSql(PushRegistrations.list(principal))
        }).pipe(unexpected),
      )
      .handle("remove", ({ params }) =>
        Effect.gen(function* () {
          const id = String(params.id)
          const found = yield* withSql(PushRegistrations.get(id))
          if (!AdminAccess.owns(yield* CurrentCaller, found.principal)) {
            return yield* new PushRegistrations.RegistrationNotFound({ id })
          }
          yield* withSql(PushRegistrations.remove(id))
        }).pipe(unexpected),
      )
  }),
)

const consumers = HttpApiBuilder.group(AdminApi, "consumers", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    return handlers.handle("list", () =>
      Effect.andThen(
        Effect.flatMap(CurrentCaller, (caller) => AdminAccess.operatorOnly(caller, "consumers span every tenant")),
        Status.consumers(sql),
      ).pipe(unexpected),
    )
  }),
)

const jobs = HttpApiBuilder.group(AdminApi, "jobs", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const operator = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.andThen(
        Effect.flatMap(CurrentCaller, (caller) => AdminAccess.operatorOnly(caller, "jobs span every tenant")),
        Effect.provideService(effect, SqlClient.SqlClient, sql),
      ).pipe(unexpected)
    const job = (record: JobControl.JobRecord) => ({
      ...record,
      args: record.args as never,
      errors: record.errors as never,
    })
    return handlers
      .handle("counts", () => operator(Status.jobs(sql)))
      .handle("list", ({ query }) =>
        operator(
          Effect.map(
            JobControl.list({
              state: query.state,
              kind: query.kind,
              before: query.before,
              limit: query.limit ?? defaultLimit,
            }),
            (page) => ({ items: page.jobs.map(job), next: page.next }),
          ),
        ),
      )
      .handle("retry", ({ params }) =>
        operator(Effect.andThen(JobControl.retry(params.id), Effect.map(JobControl.get(params.id), job))),
      )
      .handle("cancel", ({ params }) =>
        operator(Effect.andThen(JobControl.cancel(params.id), Effect.map(JobControl.get(params.id), job))),
      )
  }),
)

/**
 * Every group's handlers; they need `WebhookSubscriptions`, `Permissions`, the pool, and
 * `PushConfig` if push is on.
 */
export const layer = Layer.mergeAll(
  subscriptions,
  deliveries,
  recoveries,
  registrations,
  consumers,
  jobs,
  access,
  feed,
  eventTypes,
  portalLinks,
)

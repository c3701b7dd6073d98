/**
 * The `recoveries` group's handlers. A principal's filter always carries its own owner (it may
 * name no other), a replay must start from its own subscription, and a recovery that is not its
 * own is answered as one that does not exist.
 */
import { Effect, Redacted } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { SqlClient } from "effect/sql"
import * as BulkRecovery from "../webhooks/subscriptions/BulkRecovery.ts"
import { WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import * as AdminAccess from "./AdminAccess.ts"
import { AdminApi } from "./AdminApi.ts"
import { CurrentCaller } from "./AdminAuth.ts"
import { unexpected } from "./AdminErrors.ts"

export const recoveries = HttpApiBuilder.group(AdminApi, "recoveries", (handlers) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    const sql = yield* SqlClient.SqlClient
    const withServices = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      effect.pipe(
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.provideService(WebhookSubscriptions, webhooks),
      )
    /** The recovery, if the caller may see it. */
    const own = (job: bigint) =>
      Effect.gen(function* () {
        const found = yield* withServices(BulkRecovery.get(job))
        const caller = yield* CurrentCaller
        if (caller._tag === "Principal" && found.owner !== caller.principal) {
          return yield* new BulkRecovery.RecoveryNotFound({ job: String(job) })
        }
        return found
      })
    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function* () {
          const caller = yield* CurrentCaller
          const { replayTo, batchSize, ...filter } = payload
          const owner =
            caller._tag === "Operator"
              ? filter.owner
              : yield* AdminAccess.ownerFor(caller, filter.owner, "payload.owner")
          if (replayTo !== undefined) {
            for (const id of filter.subscriptions ?? []) yield* AdminAccess.subscription(webhooks, caller, id)
          }
          const requested = yield* withServices(BulkRecovery.request({ ...filter, owner }, { replayTo, batchSize }))
          return {
            job: requested.job,
            total: requested.total,
            replay:
              requested.replay === undefined
                ? null
                : { subscription: requested.replay.subscription, secret: Redacted.value(requested.replay.secret) },
          }
        }).pipe(unexpected),
      )
      .handle("get", ({ params }) => own(params.id).pipe(unexpected))
      .handle("pause", ({ params }) =>
        Effect.flatMap(own(params.id), (r) => withServices(BulkRecovery.pause(r.job))).pipe(unexpected),
      )
      .handle("resume", ({ params }) =>
        Effect.flatMap(own(params.id), (r) => withServices(BulkRecovery.resume(r.job))).pipe(unexpected),
      )
  }),
)

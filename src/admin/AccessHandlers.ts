/**
 * The `access` group's handlers: the operator's hands on the default models' rows
 * (`PermissionGrants`, `PushAudience`), refused with `ModelReplaced` where a host replaced the
 * model the rows belong to.
 */
import { Effect, Option } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../authz/PermissionGrants.ts"
import { Permissions } from "../authz/Permissions.ts"
import * as PushAudience from "../push/PushAudience.ts"
import { ModelReplaced } from "./AccessApi.ts"
import * as AdminAccess from "./AdminAccess.ts"
import { AdminApi } from "./AdminApi.ts"
import { CurrentCaller } from "./AdminAuth.ts"
import { InvalidRequest, unexpected } from "./AdminErrors.ts"
import { defaultLimit } from "./AdminSchemas.ts"

export const access = HttpApiBuilder.group(AdminApi, "access", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const permissions = yield* Permissions
    // A worker without push has no audience at all: membership rows then wait for push, harmless.
    const audience = yield* Effect.serviceOption(PushAudience.PushAudience)
    const grantsDecide = PermissionGrants.isModel(permissions)
    const membersDecide = Option.match(audience, { onNone: () => true, onSome: PushAudience.isModel })

    /** Operator only, on the pool, and only where `decides` (the model is bothy's own). */
    const operator =
      (model: "Permissions" | "PushAudience", decides: boolean) =>
      <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Effect.gen(function* () {
          yield* AdminAccess.operatorOnly(yield* CurrentCaller, "rights and audiences span every tenant")
          if (!decides) {
            return yield* new ModelReplaced({
              model,
              detail: `the host decides ${model === "Permissions" ? "who may receive" : "who is notified"}; manage it where the host keeps it`,
            })
          }
          return yield* Effect.provideService(effect, SqlClient.SqlClient, sql)
        })
    const grants = operator("Permissions", grantsDecide)
    const members = operator("PushAudience", membersDecide)

    return handlers
      .handle("grants", ({ query }) =>
        grants(Effect.map(PermissionGrants.list(query, query.limit ?? defaultLimit), (items) => ({ items }))).pipe(
          unexpected,
        ),
      )
      .handle("grant", ({ payload }) =>
        grants(Effect.as(PermissionGrants.grant(payload.principal, payload.action, payload.space), payload)).pipe(
          unexpected,
        ),
      )
      .handle("revoke", ({ query }) =>
        grants(PermissionGrants.revoke(query.principal, query.action, query.space)).pipe(unexpected),
      )
      .handle("members", ({ query }) =>
        members(Effect.map(PushAudience.members(query, query.limit ?? defaultLimit), (items) => ({ items }))).pipe(
          unexpected,
        ),
      )
      .handle("join", ({ payload }) =>
        members(Effect.as(PushAudience.join(payload.space, payload.principal), payload)).pipe(unexpected),
      )
      .handle("leave", ({ query }) => members(PushAudience.leave(query.space, query.principal)).pipe(unexpected))
      .handle("mutes", ({ query }) =>
        members(Effect.map(PushAudience.mutes(query, query.limit ?? defaultLimit), (items) => ({ items }))).pipe(
          unexpected,
        ),
      )
      .handle("mute", ({ payload }) =>
        Effect.gen(function* () {
          const space = payload.space ?? undefined
          const type = payload.type ?? undefined
          if (space === undefined && type === undefined) {
            return yield* new InvalidRequest({ field: "payload", detail: "name a space, an event type, or both" })
          }
          yield* members(
            PushAudience.mute(
              payload.principal,
              space === undefined ? { type: type! } : { space, ...(type === undefined ? {} : { type }) },
            ),
          )
          return { principal: payload.principal, space: space ?? null, type: type ?? null }
        }).pipe(unexpected),
      )
      .handle("unmute", ({ query }) =>
        members(PushAudience.unmute(query.principal, { space: query.space, type: query.type })).pipe(unexpected),
      )
  }),
)

/**
 * The `eventTypes` group's handlers: reads for every caller, changes for the operator only (the
 * catalog spans every tenant).
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { EventTypeCatalog } from "../log/EventTypeCatalog.ts"
import * as OperationalEvents from "../webhooks/subscriptions/OperationalEvents.ts"
import * as AdminAccess from "./AdminAccess.ts"
import { AdminApi } from "./AdminApi.ts"
import { CurrentCaller } from "./AdminAuth.ts"
import { unexpected } from "./AdminErrors.ts"

const operator = Effect.flatMap(CurrentCaller, (caller) =>
  AdminAccess.operatorOnly(caller, "the event-type catalog spans every tenant"),
)

export const eventTypes = HttpApiBuilder.group(AdminApi, "eventTypes", (handlers) =>
  Effect.gen(function* () {
    const catalog = yield* EventTypeCatalog.makeWith({ builtIn: OperationalEvents.catalogEntries })
    return handlers
      .handle("list", () => Effect.map(catalog.list, (items) => ({ items })).pipe(unexpected))
      .handle("get", ({ params }) => catalog.get(params.name).pipe(unexpected))
      .handle("put", ({ params, payload }) =>
        Effect.andThen(operator, catalog.put({ ...payload, name: params.name })).pipe(unexpected),
      )
      .handle("remove", ({ params }) => Effect.andThen(operator, catalog.remove(params.name)).pipe(unexpected))
  }),
)

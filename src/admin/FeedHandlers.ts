/**
 * The feed's handler: checks that the caller owns the subscription (`AdminAccess`), then reads a
 * page from `WebhookFeed`. No SQL lives here.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { SqlClient } from "effect/sql"
import * as FeedWire from "../receiver/FeedWire.ts"
import * as WebhookFeed from "../webhooks/subscriptions/WebhookFeed.ts"
import { WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import * as AdminAccess from "./AdminAccess.ts"
import { AdminApi } from "./AdminApi.ts"
import { CurrentCaller } from "./AdminAuth.ts"
import { unexpected } from "./AdminErrors.ts"
import { defaultFeedLimit } from "./FeedApi.ts"

export const feed = HttpApiBuilder.group(AdminApi, "feed", (handlers) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    const sql = yield* SqlClient.SqlClient
    return handlers.handle("page", ({ params, query }) =>
      Effect.gen(function* () {
        yield* AdminAccess.subscription(webhooks, yield* CurrentCaller, params.id)
        // The schema checked `after`, so it parses.
        const after = query.after === undefined ? undefined : FeedWire.parse(query.after)
        return yield* WebhookFeed.page(params.id, after, query.limit ?? defaultFeedLimit).pipe(
          Effect.provideService(SqlClient.SqlClient, sql),
        )
      }).pipe(unexpected),
    )
  }),
)

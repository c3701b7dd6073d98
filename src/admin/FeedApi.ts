/**
 * The pull feed in the admin API: `GET /v1/subscriptions/{id}/feed?after=<epoch>.<sequence>&limit=N`
 * answers a subscription's messages in `sequence` order, with the very ids and bodies its pushes
 * carried (`WebhookFeed`), for the receiver kit (`bothy/receiver`) or any receiver that lost some.
 *
 * What it keeps true: only the subscription's owner principal (or the operator) reads it; another's
 * is a 404, as everywhere in the API. A malformed `after` or a `limit` out of 1..500 is a 400 naming
 * the parameter; a position past retention is a 410 naming the lowest one still held.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { FeedPage, FeedPastRetention, PositionText } from "../receiver/FeedWire.ts"
import { maxLimit } from "../webhooks/subscriptions/WebhookFeed.ts"
import { SubscriptionNotFound } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import { UuidId } from "./AdminSchemas.ts"

export class FeedApi extends HttpApiGroup.make("feed")
  .add(
    HttpApiEndpoint.get("page", "/subscriptions/:id/feed", {
      params: { id: UuidId },
      query: {
        /** The position handled last; without it, from the lowest position still held. */
        after: Schema.optional(PositionText),
        /** Entries per page: 1 to 500, 100 when absent. */
        limit: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: maxLimit }))),
      },
      success: FeedPage,
      error: [SubscriptionNotFound.pipe(HttpApiSchema.status(404)), FeedPastRetention],
    }),
  )
  .prefix("/v1")
  .annotateMerge(
    OpenApi.annotations({
      title: "feed",
      description:
        "A subscription's messages in sequence order, the very ids and bodies its pushes carried (owner or operator)",
    }),
  ) {}

/** Entries per page when `limit` is absent. */
export const defaultFeedLimit = 100

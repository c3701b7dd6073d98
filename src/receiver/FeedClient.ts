/**
 * The receiver kit's client of the pull feed (`GET /v1/subscriptions/{id}/feed`): one page after a
 * position, with the subscription owner's bearer token, decoded with the schemas the server encodes
 * with (`FeedWire`).
 *
 * What it keeps true: a 410 is `FeedPastRetention` as the server said it (with the lowest position
 * still held); any other failure (no answer, another status, a body that does not decode) is
 * `FeedUnavailable`, which a receiver answers with a retryable status so the push comes again.
 */
import { Effect, type Redacted, Schema } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import * as FeedWire from "./FeedWire.ts"

export interface FeedOptions {
  /** The admin API's base URL, e.g. `https://bothy.example.com`. */
  readonly url: string
  /** The subscription owner's bearer token for the admin API. */
  readonly token: Redacted.Redacted<string>
  /** Entries per page (1 to 500; 100 by default). */
  readonly pageSize?: number
}

export class FeedUnavailable extends Schema.TaggedError<FeedUnavailable>()("FeedUnavailable", {
  subscription: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `the feed of subscription ${this.subscription} could not be read: ${this.detail}`
  }
}

const PastRetentionBody = Schema.Struct({ lowest: Schema.NullOr(Schema.String) })

/** The page after `after` (from the lowest position held when undefined). */
export const page = (options: FeedOptions, subscription: string, after: FeedWire.Position | undefined) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const unavailable = (detail: string) => new FeedUnavailable({ subscription, detail })
    const base = options.url.replace(/\/+$/, "")
    const request = HttpClientRequest.get(`${base}/v1/subscriptions/${encodeURIComponent(subscription)}/feed`).pipe(
      HttpClientRequest.bearerToken(options.token),
      HttpClientRequest.setUrlParams({
        limit: String(options.pageSize ?? 100),
        ...(after === undefined ? {} : { after: FeedWire.format(after) }),
      }),
    )
    const response = yield* client.execute(request).pipe(Effect.mapError((e) => unavailable(e.message)))
    const json = yield* response.json.pipe(
      Effect.mapError((e) => unavailable(`status ${response.status}: ${e.message}`)),
    )
    if (response.status === 410) {
      const gone = yield* Schema.decodeUnknownEffect(PastRetentionBody)(json).pipe(
        Effect.mapError((e) => unavailable(`status 410: ${e.message}`)),
      )
      return yield* new FeedWire.FeedPastRetention({
        subscription,
        after: after === undefined ? "" : FeedWire.format(after),
        lowest: gone.lowest,
      })
    }
    if (response.status !== 200) return yield* unavailable(`status ${response.status}: ${JSON.stringify(json)}`)
    return yield* Schema.decodeUnknownEffect(FeedWire.FeedPage)(json).pipe(
      Effect.mapError((e) => unavailable(`the page does not decode: ${e.message}`)),
    )
  }).pipe(Effect.withSpan("FeedClient.page", { attributes: { "webhook.subscription": subscription } }))

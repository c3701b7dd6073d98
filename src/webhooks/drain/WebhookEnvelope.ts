/**
 * What a receiver gets for one delivery: the JSON envelope (`version`, `type`, `timestamp`,
 * `epoch`, `sequence`, `space`, `data`), signed with the subscription's secrets under the Standard Webhooks
 * headers (`WebhookSignature`), with the subscription's extra headers (`SubscriptionOptions`)
 * beneath them, POSTed through the run's checked connections for the endpoint's TLS identity,
 * with its OAuth2 bearer token when it wants one (`EndpointAccess`).
 *
 * What it keeps true: the `webhook-id` comes from the delivery's epoch, subscription and number,
 * so a re-send is the same message to the receiver; a rotated-out secret signs too until its
 * overlap ends; secrets stay `Redacted` and are opened once per run. Nothing goes on record here.
 */
import { Clock, Effect, Option, Redacted, Schema, type Tracer } from "effect"
import type { SecretBoxError } from "../../crypto/SecretBox.ts"
import type { OAuthTokenFailed } from "../../outbound/OAuthClientCredentials.ts"
import * as OutboundSender from "../../outbound/OutboundSender.ts"
import { storable } from "../../platform/StorableText.ts"
import * as TraceParent from "../../platform/TraceParent.ts"
import * as SubscriptionOptions from "../subscriptions/SubscriptionOptions.ts"
import type { Drain } from "./Drain.ts"
import type { Run } from "./DrainRunState.ts"
import { bearer, connectionsFor, openSecret } from "./EndpointAccess.ts"
import type { PendingDelivery, Sent } from "./PendingDeliveries.ts"
import * as WebhookSignature from "./WebhookSignature.ts"

/**
 * The envelope as receivers read it: what the admin API's OpenAPI document publishes under
 * `webhooks`, so a receiver's team can generate its types. `body` writes exactly these fields.
 */
export const Envelope = Schema.Struct({
  version: Schema.Literal(1).annotate({ description: "The envelope's version; a change of shape gets a new one" }),
  type: Schema.String.annotate({ description: "The event's type, e.g. `order.created`" }),
  timestamp: Schema.String.annotate({
    description: "When the event was committed (ISO 8601, UTC)",
    format: "date-time",
  }),
  epoch: Schema.Int.annotate({
    description: "The log epoch the sequence number was taken in; it changes only when the database is restored",
  }),
  sequence: Schema.Int.annotate({
    description:
      "The subscription's own gap-free number for what it sends: 1, 2, 3, ...; kept on every retry and re-send. Within one epoch a gap means a message the receiver never got or failed",
  }),
  space: Schema.String.annotate({ description: "The space the event belongs to" }),
  data: Schema.Json.annotate({ description: "The event's payload, as the producer appended it" }),
}).annotate({
  identifier: "WebhookEnvelope",
  description: "The body of every webhook request (`content-type: application/json`)",
})

/** What a body is made of: the event as the log holds it, and the epoch its number was taken in. */
export type BodySource = Pick<PendingDelivery, "type" | "occurredAt" | "epoch" | "space" | "payload">

/**
 * The request body of `d`, numbered `sequence`. `epoch` goes with it: after a restore a
 * subscription's numbers start again from the backup's, in a new epoch (see `WebhookEpoch`), so
 * the pair is what never repeats. A function of the event and the numbering alone, so the pull feed
 * (`WebhookFeed`) rebuilds the very bytes the push carried.
 */
export const body = (d: BodySource, sequence: bigint): string =>
  JSON.stringify({
    version: 1,
    type: d.type,
    timestamp: d.occurredAt!.toISOString(),
    epoch: d.epoch,
    sequence: Number(sequence),
    space: d.space,
    data: d.payload,
  } satisfies Record<keyof typeof Envelope.Type, unknown>)

/** The secrets that sign a request at `now`: the current one, and the previous one within its overlap. */
const secretsFor = (
  drain: Drain,
  run: Run,
  d: PendingDelivery,
  now: number,
): Effect.Effect<readonly [Redacted.Redacted<string>, ...Array<Redacted.Redacted<string>>], SecretBoxError> => {
  const current = openSecret(drain, run, d.secretSealed)
  if (d.previousSecretSealed === null || d.previousSecretUntil === null || d.previousSecretUntil.getTime() <= now)
    return Effect.map(current, (secret) => [secret] as const)
  const previous = openSecret(drain, run, d.previousSecretSealed)
  return Effect.flatMap(current, (secret) => Effect.map(previous, (before) => [secret, before] as const))
}

/**
 * The attempt's span continues the event's own trace (`trace_parent`), not the drain job's: one
 * job sends the events of many producers. It links to the job's span instead. It captures no stack
 * trace: one per delivery was 2 % of the worker's main thread, and the span's name says where it is.
 */
const attemptSpan = (run: Run, d: PendingDelivery, job: Option.Option<Tracer.AnySpan>) => {
  const parent = TraceParent.parse(d.traceParent)
  return Effect.withSpan(
    "WebhookDrainer.attempt",
    {
      attributes: { "webhook.subscription": run.subscriptionId, "webhook.event_seq": String(d.eventSeq) },
      ...(Option.isSome(parent) ? { parent: parent.value } : {}),
      links: Option.isSome(job) && Option.isSome(parent) ? [{ span: job.value, attributes: {} }] : [],
    },
    { captureStackTrace: false },
  )
}

/** Signs and POSTs a sendable, permitted, numbered delivery; what came back, not on record yet. */
export const send = (drain: Drain, run: Run, d: PendingDelivery, sequence: bigint) =>
  Effect.flatMap(Effect.option(Effect.currentSpan), (job) =>
    attempt(drain, run, d, sequence).pipe(attemptSpan(run, d, job)),
  )

/** The token a request carries, or the token failure that keeps it from going out. */
type Bearer =
  | { readonly _tag: "Token"; readonly token: Option.Option<Redacted.Redacted<string>> }
  | { readonly _tag: "TokenFailed"; readonly error: OAuthTokenFailed }

const bearerOf = (drain: Drain, run: Run, d: PendingDelivery, stale?: Redacted.Redacted<string>) =>
  bearer(drain, run, d, stale).pipe(
    Effect.map((token): Bearer => ({ _tag: "Token", token })),
    Effect.catchTag("OAuthTokenFailed", (error) => Effect.succeed<Bearer>({ _tag: "TokenFailed", error })),
  )

/** A token that could not be had: the attempt's outcome, with no request sent (`auth_token`). */
const tokenFailed = (error: OAuthTokenFailed, started: number) =>
  Effect.map(
    Clock.currentTimeMillis,
    (now): OutboundSender.SendResult => ({
      status: undefined,
      errorClass: "auth_token",
      body: storable(error.message, 2000),
      truncated: false,
      durationMs: now - started,
      retryAfter: undefined,
    }),
  )

/**
 * POSTs with the endpoint's token, if it wants one. A 401 to a request that carried a token
 * replaces that token once (`EndpointTokens`) and sends once more: the attempt's answer is the
 * second one.
 */
const postAuthorized = (
  drain: Drain,
  run: Run,
  d: PendingDelivery,
  started: number,
  post: (token: Option.Option<Redacted.Redacted<string>>) => Effect.Effect<OutboundSender.SendResult>,
) =>
  Effect.gen(function* () {
    const first = yield* bearerOf(drain, run, d)
    if (first._tag === "TokenFailed") return yield* tokenFailed(first.error, started)
    const answer = yield* post(first.token)
    if (answer.status !== 401 || Option.isNone(first.token)) return answer
    const again = yield* bearerOf(drain, run, d, first.token.value)
    if (again._tag === "TokenFailed") return yield* tokenFailed(again.error, started)
    return yield* post(again.token)
  })

const attempt = (drain: Drain, run: Run, d: PendingDelivery, sequence: bigint) =>
  Effect.gen(function* () {
    const payload = body(d, sequence)
    const started = yield* Clock.currentTimeMillis
    const id = WebhookSignature.messageId(d.epoch, run.subscriptionId, sequence)
    const headers = yield* WebhookSignature.sign(
      { id, timestamp: new Date(started), body: payload },
      yield* secretsFor(drain, run, d, started),
    )
    const traceparent = drain.config.traceparent === true ? yield* TraceParent.current : null
    const connections = yield* connectionsFor(drain, run, d)
    const post = (token: Option.Option<Redacted.Redacted<string>>) =>
      OutboundSender.send(
        {
          url: d.url,
          // The subscription's extra headers first: the signature's and ours are set after them, so
          // none can be replaced, whatever a row holds.
          headers: {
            ...SubscriptionOptions.usable(d.headers),
            ...headers,
            "content-type": "application/json",
            ...(traceparent === null ? {} : { traceparent }),
            ...(Option.isSome(token) ? { authorization: `Bearer ${Redacted.value(token.value)}` } : {}),
          },
          body: payload,
        },
        drain.config.policy,
        {},
        connections,
      )
    const result = yield* postAuthorized(drain, run, d, started, post)
    const answered = yield* Clock.currentTimeMillis
    const ok = result.status !== undefined && result.status >= 200 && result.status < 300
    return { delivery: d, started, answered, result, ok } satisfies Sent
  })

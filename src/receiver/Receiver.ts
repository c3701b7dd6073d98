/**
 * The receiver kit: what a team receiving bothy's webhooks puts between its HTTP endpoint and its
 * application, so the application sees each message once, in order, whatever was lost on the way.
 *
 * What it keeps true, per subscription:
 * - Every push is verified first (Standard Webhooks, with the public `standardwebhooks` package);
 *   one that does not verify is `InvalidSignature` and changes nothing.
 * - A message whose `webhook-id` was handed over, or whose position is at or before the position
 *   handed over last, is a `Duplicate`: the application never sees it twice.
 * - The application gets messages in (epoch, sequence) order without a hole: a push that does not
 *   directly follow the position (a gap, or a new epoch) is preceded by what the pull feed holds in
 *   between, each handed over as the push carried it; until the feed holds the whole gap (the
 *   missing numbers' requests are not yet on record there), the push is refused with `GapNotFilled`
 *   and, answered with a 503, comes again. Its retry finds the gap in the feed.
 * - A new epoch (a restore): its numbers go on from the backup's, so the kit cannot tell where the
 *   new epoch begins from a push; it asks the feed after its position, which answers the rest of the
 *   old epoch the database still holds and then the new epoch from its first number.
 * - The position moves only after the application's handler succeeded (`ReceiverStore.handed`); a
 *   handler that fails leaves it, and the push (answered with an error) comes again.
 *
 * Messages are handled one at a time per kit, so two pushes never race for one position.
 *
 *   push ──verify──▶ seen or at/before position? ──yes──▶ Duplicate
 *                     │ no
 *                     ▼
 *            follows the position? ──yes──▶ hand over ──▶ Handled
 *                     │ no (gap, new epoch, no position yet: hand over as the start)
 *                     ▼
 *            fill from the feed up to it ──complete──▶ hand over ──▶ Handled
 *                     │ not yet
 *                     ▼
 *                GapNotFilled (503: the push comes again)
 */
import { type Array as Arr, Effect, Option, Redacted, Schema, Semaphore } from "effect"
import type { HttpClient } from "effect/http"
import { Webhook } from "standardwebhooks"
import * as FeedClient from "./FeedClient.ts"
import * as FeedWire from "./FeedWire.ts"
import * as ReceiverStore from "./ReceiverStore.ts"

/** The envelope's fields as the kit reads them (the admin API's OpenAPI document has the rest). */
export const Envelope = Schema.Struct({
  version: Schema.Number,
  type: Schema.String,
  timestamp: Schema.String,
  epoch: Schema.Int,
  sequence: Schema.Number,
  space: Schema.String,
  data: Schema.Json,
})

export type Envelope = typeof Envelope.Type

/** One message, handed to the application once. */
export interface Message {
  /** Its `webhook-id`: `msg_<epoch>_<subscription>_<sequence>`. */
  readonly id: string
  readonly subscription: string
  readonly epoch: number
  readonly sequence: bigint
  /** The body exactly as it was sent. */
  readonly body: string
  readonly envelope: Envelope
  /** It came by its push, or from the feed to fill a gap. */
  readonly source: "push" | "feed"
}

/** What became of a push. */
export type Outcome =
  | { readonly _tag: "Handled"; readonly handed: number }
  | { readonly _tag: "Duplicate"; readonly id: string }

export class InvalidSignature extends Schema.TaggedError<InvalidSignature>()("InvalidSignature", {
  detail: Schema.String,
}) {
  override get message() {
    return `the webhook does not verify: ${this.detail}`
  }
}

export class InvalidMessage extends Schema.TaggedError<InvalidMessage>()("InvalidMessage", {
  id: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `webhook ${this.id} is not a bothy message: ${this.detail}`
  }
}

/** The feed does not hold the whole gap before a push yet; answer 503 and the push comes again. */
export class GapNotFilled extends Schema.TaggedError<GapNotFilled>()("GapNotFilled", {
  subscription: Schema.String,
  after: Schema.String,
  before: Schema.String,
}) {
  override get message() {
    return `subscription ${this.subscription}: the feed does not yet hold everything between ${this.after} and ${this.before}`
  }
}

export interface Options<E, R> {
  /** The subscription's signing secrets (`whsec_...`); during a rotation, the old and the new one. */
  readonly secrets: Arr.NonEmptyReadonlyArray<Redacted.Redacted<string>>
  /** Where the feed is and the owner's token for it. */
  readonly feed: FeedClient.FeedOptions
  /** Where positions and ids are kept (in memory by default). */
  readonly store?: ReceiverStore.ReceiverStore
  /** The application: called once per message, in order. A failure leaves the position. */
  readonly handle: (message: Message) => Effect.Effect<void, E, R>
  /** Hears a feed entry whose body is withheld (its position is passed all the same). */
  readonly onWithheld?: (entry: FeedWire.FeedEntry) => Effect.Effect<void>
}

/** A push as the receiver's HTTP server got it: its headers and its body, unparsed. */
export interface Push {
  readonly headers: Readonly<Record<string, string | ReadonlyArray<string> | undefined>>
  readonly body: string
}

export type ReceiveError =
  | InvalidSignature
  | InvalidMessage
  | GapNotFilled
  | FeedWire.FeedPastRetention
  | FeedClient.FeedUnavailable
  | ReceiverStore.ReceiverStoreError

const idShape = /^msg_([0-9]+)_(.+)_([0-9]+)$/

/** The message a verified body and its id make, checked against each other. */
const messageOf = (id: string, body: string, source: Message["source"]) =>
  Effect.gen(function* () {
    const match = idShape.exec(id)
    if (match === null)
      return yield* new InvalidMessage({ id, detail: "the id is not msg_<epoch>_<subscription>_<sequence>" })
    const envelope = yield* Schema.decodeUnknownEffect(Schema.fromJsonString(Envelope))(body).pipe(
      Effect.mapError((e) => new InvalidMessage({ id, detail: `the body is not an envelope: ${e.message}` })),
    )
    const epoch = Number(match[1])
    const sequence = BigInt(match[3]!)
    if (envelope.epoch !== epoch || BigInt(envelope.sequence) !== sequence) {
      return yield* new InvalidMessage({ id, detail: "the envelope's epoch and sequence are not the id's" })
    }
    return { id, subscription: match[2]!, epoch, sequence, body, envelope, source } satisfies Message
  })

const header = (headers: Push["headers"], name: string) => {
  const value = Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1]
  return typeof value === "string" ? value : (value?.[0] ?? "")
}

/** Verifies `push` with any of `verifiers`; the id it carries. */
const verify = (verifiers: ReadonlyArray<Webhook>, push: Push) =>
  Effect.gen(function* () {
    const headers = {
      "webhook-id": header(push.headers, "webhook-id"),
      "webhook-timestamp": header(push.headers, "webhook-timestamp"),
      "webhook-signature": header(push.headers, "webhook-signature"),
    }
    let last = "no secret"
    for (const verifier of verifiers) {
      try {
        verifier.verify(push.body, headers)
        return headers["webhook-id"]
      } catch (e) {
        last = e instanceof Error ? e.message : String(e)
      }
    }
    return yield* new InvalidSignature({ detail: last })
  })

/** Makes the kit; call `receive` from the HTTP handler that gets the pushes. */
export const make = <E, R>(options: Options<E, R>) =>
  Effect.gen(function* () {
    const store = options.store ?? ReceiverStore.memory()
    const verifiers = options.secrets.map((secret) => new Webhook(Redacted.value(secret)))
    const one = yield* Semaphore.make(1)

    const handOver = (message: Message) =>
      Effect.andThen(
        options.handle(message),
        store.handed(message.subscription, message.id, { epoch: message.epoch, sequence: message.sequence }),
      )

    /**
     * Hands over the feed's entries after `from` and before `until` (all when undefined): the position
     * reached, and whether the feed showed `until` or what follows it (so nothing before it is missing).
     */
    const fill = (subscription: string, from: Option.Option<FeedWire.Position>, until?: FeedWire.Position) =>
      Effect.gen(function* () {
        let at = from
        let handed = 0
        for (;;) {
          const page = yield* FeedClient.page(options.feed, subscription, Option.getOrUndefined(at))
          let moved = false
          for (const entry of page.items) {
            const position = { epoch: entry.epoch, sequence: BigInt(entry.sequence) }
            if (until !== undefined && !FeedWire.before(position, until)) return { at, handed, complete: true }
            if (entry.body === null) {
              yield* options.onWithheld?.(entry) ?? Effect.void
              yield* store.handed(subscription, entry.id, position)
            } else {
              yield* handOver(yield* messageOf(entry.id, entry.body, "feed"))
              handed++
            }
            at = Option.some(position)
            moved = true
          }
          if (!moved) return { at, handed, complete: false }
        }
      })

    const accept = (message: Message) =>
      Effect.gen(function* () {
        if (yield* store.seen(message.id)) return { _tag: "Duplicate", id: message.id } satisfies Outcome
        const position = { epoch: message.epoch, sequence: message.sequence }
        const at = yield* store.position(message.subscription)
        if (Option.isSome(at) && !FeedWire.before(at.value, position)) {
          return { _tag: "Duplicate", id: message.id } satisfies Outcome
        }
        const next = (p: FeedWire.Position) => p.epoch === position.epoch && p.sequence + 1n === position.sequence
        if (Option.isNone(at) || next(at.value)) {
          yield* handOver(message)
          return { _tag: "Handled", handed: 1 } satisfies Outcome
        }
        const filled = yield* fill(message.subscription, at, position)
        const reached = Option.getOrElse(filled.at, () => position)
        // A later epoch's first number is only known from the feed: the push directly follows what the
        // feed handed over, or the feed showed the push's own position (or past it).
        if (!filled.complete && !next(reached)) {
          return yield* new GapNotFilled({
            subscription: message.subscription,
            after: FeedWire.format(reached),
            before: FeedWire.format(position),
          })
        }
        if (FeedWire.before(reached, position)) yield* handOver(message)
        return { _tag: "Handled", handed: filled.handed + 1 } satisfies Outcome
      })

    return {
      /**
       * Verifies a push and hands it (and any gap before it) to the application. Answer 2xx for an
       * `Outcome`, 400 for `InvalidSignature` and `InvalidMessage`, 503 for anything else (`statusOf`).
       */
      receive: (push: Push): Effect.Effect<Outcome, ReceiveError | E, R | HttpClient.HttpClient> =>
        Effect.flatMap(verify(verifiers, push), (id) =>
          Effect.flatMap(messageOf(id, push.body, "push"), (message) => one.withPermits(1)(accept(message))),
        ).pipe(Effect.withSpan("Receiver.receive")),
      /**
       * Hands over whatever the feed holds after the position of `subscription` (from the lowest
       * position it holds when there is none): after a restart, or to drain a backlog without waiting
       * for a push. How many were handed over.
       */
      catchUp: (subscription: string) =>
        one.withPermits(1)(
          Effect.flatMap(store.position(subscription), (at) => fill(subscription, at)).pipe(
            Effect.map((filled) => filled.handed),
          ),
        ),
    }
  })

export type Receiver<E, R> = Effect.Success<ReturnType<typeof make<E, R>>>

/** The HTTP status to answer a push with, from what `receive` gave. */
export const statusOf = (result: Outcome | { readonly _tag: string }): number =>
  result._tag === "Handled" || result._tag === "Duplicate"
    ? 204
    : result._tag === "InvalidSignature" || result._tag === "InvalidMessage"
      ? 400
      : 503

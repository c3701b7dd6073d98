/**
 * The pull feed's wire format, held once for both ends: the admin API encodes its answers with these
 * schemas (`GET /v1/subscriptions/{id}/feed`) and the receiver kit decodes them with the same ones.
 *
 * What it keeps true: a position is `<epoch>.<sequence>`, the pair a receiver reads in every
 * envelope and `webhook-id`; positions order by epoch first, then sequence (a restore starts a new
 * epoch whose numbers go on from the backup's, so a later epoch may number below what a receiver saw
 * in an earlier one). A position that is not one (not two whole numbers, an epoch past int4, a
 * sequence past int8) is refused by the schema, so the API answers 400 before any SQL runs.
 */
import { Schema } from "effect"

/** A place in a subscription's numbering: what a receiver has handled up to. */
export interface Position {
  readonly epoch: number
  readonly sequence: bigint
}

const maxEpoch = 2 ** 31 - 1
const maxSequence = 2n ** 63n - 1n
const shape = /^([0-9]{1,10})\.([0-9]{1,19})$/

/** `<epoch>.<sequence>` as text, the way `after` and `next` carry it. */
export const format = (position: Position): string => `${position.epoch}.${position.sequence}`

/** The position of `text`, or undefined when it is not one (see `PositionText`). */
export const parse = (text: string): Position | undefined => {
  const match = shape.exec(text)
  if (match === null) return undefined
  const epoch = Number(match[1])
  const sequence = BigInt(match[2]!)
  return epoch <= maxEpoch && sequence <= maxSequence ? { epoch, sequence } : undefined
}

/** Whether `a` comes before `b` (epoch first, then sequence). */
export const before = (a: Position, b: Position): boolean =>
  a.epoch < b.epoch || (a.epoch === b.epoch && a.sequence < b.sequence)

/** Whether `next` directly follows `at`: the next number of the same epoch, or a later epoch's first. */
export const follows = (at: Position, next: Position): boolean =>
  next.epoch > at.epoch || (next.epoch === at.epoch && next.sequence === at.sequence + 1n)

/** A position as text, checked: 0 to 2^31-1, a dot, 0 to 2^63-1. */
export const PositionText = Schema.String.check(
  Schema.makeFilter<string>((text) =>
    parse(text) === undefined
      ? `expected <epoch>.<sequence>: two whole numbers, the epoch up to ${maxEpoch}, the sequence up to ${maxSequence}`
      : undefined,
  ),
).annotate({ description: "A position `<epoch>.<sequence>`, as in the envelope and the webhook-id" })

/** One message as its push carried it. */
export const FeedEntry = Schema.Struct({
  /** The `webhook-id` it went out with: `msg_<epoch>_<subscription>_<sequence>`. */
  id: Schema.String,
  epoch: Schema.Int,
  /** The subscription's number, as a decimal string (an int8). */
  sequence: Schema.String,
  /**
   * The `webhook-timestamp` of its first request (Unix seconds); a re-send carries its own. For a
   * request a stopped worker left unrecorded, the time it was found in doubt.
   */
  timestamp: Schema.NullOr(Schema.String),
  /**
   * The request body exactly as it was sent (verify or parse this string, never a re-serialised
   * copy); null when withheld.
   */
  body: Schema.NullOr(Schema.String),
  /**
   * Why the body is withheld: the owner lost the right to its space (`permission`) or the space left
   * the subscription's scope (`scope`) after it was first sent, so the feed does not show it again.
   */
  withheld: Schema.NullOr(Schema.Literals(["permission", "scope"])),
}).annotate({ identifier: "FeedEntry" })

export type FeedEntry = typeof FeedEntry.Type

export const FeedPage = Schema.Struct({
  /** In `sequence` order, gap-free from `after`. */
  items: Schema.Array(FeedEntry),
  /** The position to ask after next: the last item's, or `after` when there is none yet. */
  next: Schema.NullOr(Schema.String),
}).annotate({ identifier: "FeedPage" })

export type FeedPage = typeof FeedPage.Type

/**
 * The answer past retention (410): the messages right after `after` left the log or the delivery
 * history; `lowest` is the first position the feed still holds (null: none), so a receiver resyncs
 * from the host's own API up to there and goes on after it.
 */
export class FeedPastRetention extends Schema.TaggedError<FeedPastRetention>()(
  "FeedPastRetention",
  { subscription: Schema.String, after: Schema.String, lowest: Schema.NullOr(Schema.String) },
  { httpApiStatus: 410 },
) {
  override get message() {
    return `the feed of subscription ${this.subscription} no longer holds what follows ${this.after}: ${
      this.lowest === null ? "it holds nothing" : `the lowest position it holds is ${this.lowest}`
    }`
  }
}

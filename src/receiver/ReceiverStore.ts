/**
 * What the receiver kit remembers between messages: which `webhook-id`s it handed to the application
 * and, per subscription, the position handed over last. The contract a receiver replaces (a table in
 * its own database, a key-value store) beside the in-memory default.
 *
 * What a store keeps true: `handed` records the id and the new position together, and `position`
 * never moves backwards. A store that records in the same transaction as the application's own
 * effect makes the hand-over exactly once across crashes; the in-memory one holds for the life of
 * the process (a restart hands over again what the feed still holds after the position it starts from).
 */
import { Effect, Option, Schema } from "effect"
import type { Position } from "./FeedWire.ts"

/** A store that could not answer; the message is not handed over (the push comes again). */
export class ReceiverStoreError extends Schema.TaggedError<ReceiverStoreError>()("ReceiverStoreError", {
  detail: Schema.String,
}) {
  override get message() {
    return `the receiver's store failed: ${this.detail}`
  }
}

export interface ReceiverStore {
  /** Whether the message with this `webhook-id` was handed over. */
  readonly seen: (id: string) => Effect.Effect<boolean, ReceiverStoreError>
  /** The position handed over last for `subscription`; none before the first message. */
  readonly position: (subscription: string) => Effect.Effect<Option.Option<Position>, ReceiverStoreError>
  /** The message `id` at `position` was handed over. */
  readonly handed: (subscription: string, id: string, position: Position) => Effect.Effect<void, ReceiverStoreError>
}

/**
 * The in-memory store: positions, and the last `capacity` ids (100,000 by default; the oldest go
 * first). A repeat older than those is still dropped by its position.
 */
export const memory = (options: { readonly capacity?: number } = {}): ReceiverStore => {
  const capacity = options.capacity ?? 100_000
  const positions = new Map<string, Position>()
  const ids = new Set<string>()
  return {
    seen: (id) => Effect.sync(() => ids.has(id)),
    position: (subscription) => Effect.sync(() => Option.fromNullishOr(positions.get(subscription))),
    handed: (subscription, id, position) =>
      Effect.sync(() => {
        positions.set(subscription, position)
        ids.add(id)
        if (ids.size > capacity) ids.delete(ids.values().next().value!)
      }),
  }
}

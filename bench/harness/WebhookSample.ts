/**
 * The subscriptions and events the webhook benchmarks share: subscription k covers the one space
 * `bench-k` and belongs to `owner`; event i of a run over S subscriptions is in space
 * `bench-(i mod S)`, so it matches exactly one subscription, and carries `i` in its payload, so a
 * receiver can tell which event each request is and whether they came in order.
 *
 * Only types from src/: the backlog driver imports this module in a child process that runs an
 * earlier source tree's modules, and must not load this checkout's.
 */
import type { NewEvent } from "../../src/log/Event.ts"

export const owner = "bench-owner"
export const spaceOf = (k: number) => `bench-${k}`

/** Event i: space `bench-(i mod subscriptions)`, about 100 bytes of payload carrying `i`. */
export const eventAt = (i: number, subscriptions: number): NewEvent => {
  const hex = (n: number) => (Math.imul(n + 1, 2654435761) >>> 0).toString(16).padStart(8, "0")
  return {
    space: spaceOf(i % subscriptions),
    type: ["order.placed", "order.shipped", "invoice.paid"][i % 3]!,
    actor: `user:${hex(i)}`,
    payload: {
      i,
      id: `ord_${hex(i * 7)}`,
      amount: 1000 + ((i * 3779) % 90000),
      currency: ["EUR", "USD", "GBP"][i % 3]!,
      note: "leave at the door",
    },
  }
}

/**
 * The event every benchmark appends: fixed and varied (realistic strings, a payload of about 100
 * bytes as JSON), so every implementation and every run writes the same bytes.
 */
import type { NewEvent } from "../../src/log/Event.ts"

const hex = (n: number) => (Math.imul(n + 1, 2654435761) >>> 0).toString(16).padStart(8, "0")

/** The i-th sample event; `space` replaces its space when a benchmark routes events itself. */
export const eventAt = (i: number, space?: string): NewEvent => ({
  space: space ?? ["acme-corp/shop", "acme-corp/billing", "globex/support", "initech/crm", "umbrella/lab"][i % 5]!,
  type: ["order.placed", "order.shipped", "invoice.paid", "ticket.opened", "contact.updated"][i % 5]!,
  actor: `user:${hex(i)}`,
  payload: {
    id: `ord_${hex(i * 7)}`,
    amount: 1000 + ((i * 3779) % 90000),
    currency: ["EUR", "USD", "GBP"][i % 3]!,
    items: 1 + (i % 7),
    channel: ["web", "ios", "android", "pos"][i % 4]!,
    note: "leave at the door",
  },
})

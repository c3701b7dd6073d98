/** When a subscription was created, for its console page (`Subscription` does not carry it). */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"

export const of = Effect.fn("SubscriptionCreated.of")(function* (id: string) {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ createdAt: Date }>`
    SELECT created_at AS "createdAt" FROM webhook_subscriptions WHERE id = ${id}::uuid`
  return row?.createdAt
})

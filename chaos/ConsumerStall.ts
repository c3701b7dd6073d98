/**
 * Holds both consumers behind: a transaction of the harness's own (a plain `pg` connection named
 * `chaos-stall`, which the backend faults never pick) keeps the `webhooks` and `push` cursor rows
 * locked, so every round finds its cursor locked and ends at once, as a round must. Released, the
 * consumers go on from where they stood; what left the log meanwhile is theirs to report.
 */
import { Effect } from "effect"
import { Client } from "pg"

export const hold = (url: string) =>
  Effect.gen(function* () {
    const client = new Client({ connectionString: url, application_name: "chaos-stall" })
    yield* Effect.promise(() => client.connect())
    yield* Effect.promise(() => client.query("BEGIN"))
    const locked = yield* Effect.promise(() =>
      client.query<{ name: string; last_seq: string }>(
        "SELECT name, last_seq::text FROM event_consumer_cursors WHERE name IN ('webhooks', 'push') FOR UPDATE",
      ),
    )
    let released = false
    const release = Effect.promise(async () => {
      if (released) return
      released = true
      await client.query("COMMIT").catch(() => undefined)
      await client.end().catch(() => undefined)
    })
    yield* Effect.addFinalizer(() => release)
    return { cursors: locked.rows.map((r) => ({ name: r.name, lastSeq: BigInt(r.last_seq) })), release }
  })

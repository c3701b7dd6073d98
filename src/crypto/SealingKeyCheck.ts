/**
 * One sealing key per database. Every process that seals or opens webhook secrets on a database
 * (each worker's drain jobs, each host process that creates subscriptions) must hold the same
 * `BOTHY_WEBHOOK_SECRET_KEY`; a process given another key would run and fail every delivery with
 * `KeyMismatch`, or seal secrets no worker can open.
 *
 * So the first process to use a key on a database records it (`webhook_sealing_key`: the key id
 * and a check value sealed under it), and every later one must open that check value, or it
 * refuses to start with `SealingKeyMismatch` naming the variable and both key ids. A database
 * that already holds secrets from before the check takes the key they were sealed under.
 *
 * First use is race-free: the row is inserted with `ON CONFLICT DO NOTHING` and then read again in
 * a statement of its own, so of processes starting together exactly one key is recorded, and each
 * checks itself against that one.
 */
import { Effect, Layer, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as SecretBox from "./SecretBox.ts"

export class SealingKeyMismatch extends Schema.TaggedError<SealingKeyMismatch>()("SealingKeyMismatch", {
  /** `BOTHY_WEBHOOK_SECRET_KEY` */
  variable: Schema.String,
  /** The id of the key this process was given. */
  keyId: Schema.String,
  /** The id of the key this database's secrets are sealed under. */
  databaseKeyId: Schema.String,
}) {
  override get message() {
    return `${this.variable} is key ${this.keyId}, but this database's webhook secrets are sealed under key ${this.databaseKeyId}: every worker, and every process that creates subscriptions, on one database needs the same ${this.variable}`
  }
}

// What the check value holds; it is not secret, only proof that the key opens it.
const checkPlaintext = "bothy/SealingKeyCheck"

const mismatch = (key: SecretBox.SecretKey, sealed: string) =>
  new SealingKeyMismatch({
    variable: SecretBox.keyVariable,
    keyId: key.id,
    databaseKeyId: SecretBox.keyIdOf(sealed) ?? "unknown",
  })

/** Whether `key` opens `sealed` (to `expected`, when given). */
const opens = (key: SecretBox.SecretKey, sealed: string, expected?: string) =>
  SecretBox.open(key, sealed).pipe(
    Effect.mapError(() => mismatch(key, sealed)),
    Effect.flatMap((plain) =>
      expected === undefined || Redacted.value(plain) === expected ? Effect.void : Effect.fail(mismatch(key, sealed)),
    ),
  )

/** Records `key` as this database's sealing key on first use; afterwards refuses any other key. */
export const verify = Effect.fn("SealingKeyCheck.verify")(function* (key: SecretBox.SecretKey) {
  const sql = yield* SqlClient.SqlClient
  const recorded = sql<{ sealed: string }>`SELECT check_sealed AS sealed FROM webhook_sealing_key`
  const [row] = yield* recorded
  if (row !== undefined) return yield* opens(key, row.sealed, checkPlaintext)
  const [older] = yield* sql<{ sealed: string }>`SELECT secret_sealed AS sealed FROM webhook_subscriptions LIMIT 1`
  if (older !== undefined) yield* opens(key, older.sealed)
  const inserted = yield* sql`
    INSERT INTO webhook_sealing_key (key_id, check_sealed)
    VALUES (${key.id}, ${SecretBox.seal(key, Redacted.make(checkPlaintext))})
    ON CONFLICT DO NOTHING RETURNING key_id`
  if (inserted.length > 0) {
    yield* Effect.logInfo(`webhook sealing key ${key.id} recorded for this database (${SecretBox.keyVariable})`)
  }
  // A statement of its own: it sees the row whichever process inserted it.
  const [mine] = yield* recorded
  if (mine === undefined) return yield* Effect.die("webhook_sealing_key has no row after its insert")
  yield* opens(key, mine.sealed, checkPlaintext)
})

/**
 * Runs `verify` for `key` while the layer is built. The key comes from the caller (the worker passes
 * `WebhookConfig`'s), so sealing knows nothing of the parts that seal.
 */
export const layer = (key: SecretBox.SecretKey) => Layer.effectDiscard(verify(key))

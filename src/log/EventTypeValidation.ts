/**
 * What an append checks against the event-type catalog: the payload of an event whose type the
 * catalog marks `validated` must pass the type's JSON Schema (draft 2020-12, with ajv), or the
 * append is refused with `InvalidEvent` (`SchemaMismatch`, naming the payload's field and the
 * schema's path) and appends nothing.
 *
 * What it keeps true: an append never commits having been checked against another catalog than
 * the one its statement sees. The process keeps the validated types' schemas, compiled once per
 * (type, schema) and cached, with the catalog's version; the append's statement carries that
 * version and writes nothing when the catalog's row says another (`guard`), and the append then
 * reloads and checks again. So an append costs a lookup per event and, in the statement, a read of
 * one row; the catalog is read again only after it changed.
 */
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js"
import { Effect, Option, Result } from "effect"
import type { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { InvalidEvent, type NewEvent } from "./Event.ts"

/** A JSON Schema compiler, as the catalog and the appends use it (formats are annotations). */
export const makeAjv = () => new Ajv2020({ allErrors: false, strict: false, validateFormats: false })

/** The catalog's version, and the compiled schema of each validated type at that version. */
interface Loaded {
  readonly version: bigint
  readonly validators: ReadonlyMap<string, ValidateFunction>
}

/** `payload.items[0]` from ajv's `/items/0`. */
const fieldOf = (instancePath: string) =>
  instancePath
    .split("/")
    .slice(1)
    .map((part) => part.replaceAll("~1", "/").replaceAll("~0", "~"))
    .reduce(
      (at, key) =>
        /^\d+$/.test(key)
          ? `${at}[${key}]`
          : /^[A-Za-z_$][\w$]*$/.test(key)
            ? `${at}.${key}`
            : `${at}[${JSON.stringify(key)}]`,
      "payload",
    )

/** The first event of `events` whose payload breaks its type's schema, as an `InvalidEvent`. */
export const firstMismatch = (
  validators: ReadonlyMap<string, ValidateFunction>,
  events: ReadonlyArray<NewEvent>,
): Option.Option<InvalidEvent> => {
  for (const [index, event] of events.entries()) {
    const validate = validators.get(event.type)
    if (validate === undefined || validate(event.payload)) continue
    const error = validate.errors?.[0]
    const schemaPath = error?.schemaPath ?? "#"
    return Option.some(
      new InvalidEvent({
        index,
        reason: "SchemaMismatch",
        field: fieldOf(error?.instancePath ?? ""),
        schemaPath,
        detail: `the payload breaks the ${event.type} schema at ${schemaPath}: ${error?.message ?? "invalid"}`,
      }),
    )
  }
  return Option.none()
}

/**
 * The catalog's check for one process: `check` validates a batch against the catalog as last
 * loaded and gives the version it used; `guard` is the append statement's condition that the
 * catalog is still at it; `reload` reads the catalog again (after a guard failed).
 */
export const make = (sql: SqlClient.SqlClient) =>
  Effect.sync(() => {
    const compiled = new Map<string, { readonly schema: string; readonly validate: ValidateFunction }>()
    const ajv = makeAjv()
    let loaded: Loaded | undefined

    const load = Effect.gen(function* () {
      const rows = yield* sql<{ version: bigint; name: string | null; schema: unknown }>`
        SELECT c.version, t.name, t.schema
        FROM event_type_catalog AS c LEFT JOIN event_types AS t ON t.validated`
      const validators = new Map<string, ValidateFunction>()
      for (const row of rows) {
        if (row.name === null) continue
        const text = JSON.stringify(row.schema)
        let entry = compiled.get(row.name)
        if (entry?.schema !== text) {
          // The catalog compiled this schema when it was written; a hand-written row that does
          // not compile validates nothing rather than stopping every append.
          const attempt = Result.try(() => ajv.compile(row.schema as object))
          if (Result.isFailure(attempt)) continue
          entry = { schema: text, validate: attempt.success }
          compiled.set(row.name, entry)
        }
        validators.set(row.name, entry.validate)
      }
      loaded = { version: rows[0]?.version ?? 0n, validators }
      return loaded
    })

    const check = (events: ReadonlyArray<NewEvent>): Effect.Effect<bigint, InvalidEvent | SqlError> =>
      Effect.gen(function* () {
        const cached = loaded
        let current = cached ?? (yield* load)
        let mismatch = firstMismatch(current.validators, events)
        // A refusal is checked against the catalog as it is now: the type may have changed since.
        if (Option.isSome(mismatch) && cached !== undefined) {
          current = yield* load
          mismatch = firstMismatch(current.validators, events)
        }
        if (Option.isSome(mismatch)) return yield* mismatch.value
        return current.version
      })

    return {
      check,
      reload: Effect.asVoid(load),
      /** True when the catalog is still at `version` (a condition of the append's statement). */
      guard: (version: bigint) => sql`EXISTS (SELECT FROM event_type_catalog WHERE version = ${version})`,
    }
  })

export type CatalogCheck = Effect.Success<ReturnType<typeof make>>

/**
 * The event-type catalog: the types producers append, each with a description, the JSON Schema
 * (draft 2020-12) of its payload, an example, and two flags: `deprecated`, and `validated` (appends
 * of the type whose payload breaks the schema are refused, `EventTypeValidation`).
 *
 * What it keeps true: every entry written has a schema that compiles and an example that passes
 * it, and a validated type has a schema; a bad entry is an `InvalidEventType` naming the field, and
 * nothing is written. Every change bumps the catalog's version in the same transaction, so no
 * append checked against the catalog before the change commits after it (`EventTypeValidation`).
 * The catalog is "on" once it holds a type: webhook subscriptions may then name only its types, or
 * patterns that match one (`knownNames`).
 *
 * Built-in types (bothy's own operational events, `bothy.*`) are given by whoever builds the
 * catalog (`makeWith`): the log knows no consumer, so it does not know them itself. They are
 * listed and read like the others, always, but never written to the table, so they do not turn
 * the catalog on; no entry may be put under the reserved prefix `bothy.`, nor a built-in removed.
 */
import { Context, Effect, Layer, Result, Schema } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { firstIssue } from "../platform/FieldIssue.ts"
import { storableCheck } from "../platform/StorableText.ts"
import { EventType } from "./Event.ts"
import { makeAjv } from "./EventTypeValidation.ts"

/** One type of the catalog, as written and read back. */
export const EventTypeEntry = Schema.Struct({
  name: EventType,
  description: Schema.String.check(Schema.isMaxLength(2000), storableCheck),
  /** The payload's JSON Schema (draft 2020-12); null: none (the type is then never validated). */
  schema: Schema.NullOr(Schema.Json),
  /** An example payload; it must pass the schema. */
  example: Schema.NullOr(Schema.Json),
  deprecated: Schema.Boolean,
  /** Appends of this type are checked against the schema. */
  validated: Schema.Boolean,
})
export type EventTypeEntry = typeof EventTypeEntry.Type

/** What `put` takes: the name, and the rest defaulting to empty, null and false. */
export const NewEventType = Schema.Struct({
  name: EventTypeEntry.fields.name,
  description: Schema.optional(EventTypeEntry.fields.description),
  schema: Schema.optional(EventTypeEntry.fields.schema),
  example: Schema.optional(EventTypeEntry.fields.example),
  deprecated: Schema.optional(Schema.Boolean),
  validated: Schema.optional(Schema.Boolean),
})
export type NewEventType = typeof NewEventType.Type

export class InvalidEventType extends Schema.TaggedError<InvalidEventType>()("InvalidEventType", {
  /** The offending field (`name`, `schema`, `example`, `validated`). */
  field: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `invalid event type${this.field === "" ? "" : ` at ${this.field}`}: ${this.detail}`
  }
}

/** The prefix of bothy's own event types: no catalog entry may be put under it. */
export const reservedPrefix = "bothy."

export class EventTypeNotFound extends Schema.TaggedError<EventTypeNotFound>()("EventTypeNotFound", {
  name: Schema.String,
}) {
  override get message() {
    return `no event type ${this.name} in the catalog`
  }
}

/** The entry `input` stands for, with its defaults, or the first thing wrong with it. */
const checkEntry = (input: unknown) =>
  Effect.gen(function* () {
    const given = yield* Schema.decodeUnknownEffect(NewEventType)(input).pipe(
      Effect.mapError((e) => new InvalidEventType(firstIssue(e))),
    )
    const entry: EventTypeEntry = {
      name: given.name,
      description: given.description ?? "",
      schema: given.schema ?? null,
      example: given.example ?? null,
      deprecated: given.deprecated ?? false,
      validated: given.validated ?? false,
    }
    if (entry.validated && entry.schema === null) {
      return yield* new InvalidEventType({ field: "validated", detail: "a validated type needs a schema" })
    }
    if (entry.schema === null) return entry
    const compiled = Result.try(() => makeAjv().compile(entry.schema as object))
    if (Result.isFailure(compiled)) {
      return yield* new InvalidEventType({ field: "schema", detail: `not a JSON Schema: ${String(compiled.failure)}` })
    }
    if (entry.example !== null && !compiled.success(entry.example)) {
      const error = compiled.success.errors?.[0]
      return yield* new InvalidEventType({
        field: "example",
        detail: `the example breaks the schema at ${error?.schemaPath ?? "#"}: ${error?.message ?? "invalid"}`,
      })
    }
    return entry
  })

const selectEntries = (sql: SqlClient.SqlClient, name: string | undefined) =>
  sql<EventTypeEntry>`
    SELECT name, description, schema, example, deprecated, validated FROM event_types
    WHERE ${name === undefined ? sql`true` : sql`name = ${name}`} ORDER BY name`

const bumpVersion = (sql: SqlClient.SqlClient) => sql`UPDATE event_type_catalog SET version = version + 1`

/**
 * The names in the catalog (empty: the catalog is off), for a subscription's check of its types.
 * A fragment of the catalog's owner, so other parts need not name its table.
 */
export const knownNames = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ name: string }>`SELECT name FROM event_types ORDER BY name`
  return rows.map((r) => r.name)
})

export class EventTypeCatalog extends Context.Service<
  EventTypeCatalog,
  {
    /** Adds the type, or replaces it whole; validated types are checked from the next append on. */
    readonly put: (entry: NewEventType) => Effect.Effect<EventTypeEntry, InvalidEventType | SqlError>
    readonly get: (name: string) => Effect.Effect<EventTypeEntry, EventTypeNotFound | SqlError>
    /** Every type, by name. */
    readonly list: Effect.Effect<ReadonlyArray<EventTypeEntry>, SqlError>
    /** Removes the type (events already in the log keep it; subscriptions naming it stay). */
    /** A built-in type is refused (`InvalidEventType`). */
    readonly remove: (name: string) => Effect.Effect<void, EventTypeNotFound | InvalidEventType | SqlError>
  }
>()("bothy/EventTypeCatalog") {
  /** The catalog on the pool in context, with no built-in types. */
  static readonly make = Effect.suspend(() => EventTypeCatalog.makeWith({ builtIn: [] }))

  /** The catalog on the pool in context, listing `builtIn` beside its own entries (the admin API builds it so). */
  static readonly makeWith = (options: { readonly builtIn: ReadonlyArray<EventTypeEntry> }) =>
    makeCatalog(options.builtIn)

  static readonly layer = Layer.effect(EventTypeCatalog, EventTypeCatalog.make)
}

const reserved = (name: string) =>
  name.startsWith(reservedPrefix)
    ? Effect.fail(
        new InvalidEventType({ field: "name", detail: `${reservedPrefix}* types are bothy's own and built in` }),
      )
    : Effect.void

const makeCatalog = (builtIn: ReadonlyArray<EventTypeEntry>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const builtInNamed = (name: string) => builtIn.find((e) => e.name === name)
    const put = Effect.fn("EventTypeCatalog.put")(function* (input: NewEventType) {
      const entry = yield* checkEntry(input)
      yield* reserved(entry.name)
      const json = (value: unknown) => (value === null ? null : JSON.stringify(value))
      yield* sql.withTransaction(
        Effect.andThen(
          sql`
              INSERT INTO event_types (name, description, schema, example, deprecated, validated)
              VALUES (${entry.name}, ${entry.description}, ${json(entry.schema)}::jsonb, ${json(entry.example)}::jsonb,
                      ${entry.deprecated}, ${entry.validated})
              ON CONFLICT (name) DO UPDATE SET description = excluded.description, schema = excluded.schema,
                example = excluded.example, deprecated = excluded.deprecated, validated = excluded.validated,
                updated_at = clock_timestamp()`,
          bumpVersion(sql),
        ),
      )
      return entry
    })
    const get = Effect.fn("EventTypeCatalog.get")(function* (name: string) {
      const own = builtInNamed(name)
      if (own !== undefined) return own
      const [row] = yield* selectEntries(sql, name)
      return row ?? (yield* new EventTypeNotFound({ name }))
    })
    const remove = Effect.fn("EventTypeCatalog.remove")(function* (name: string) {
      if (builtInNamed(name) !== undefined) return yield* reserved(name)
      const removed = yield* sql.withTransaction(
        Effect.gen(function* () {
          const rows = yield* sql`DELETE FROM event_types WHERE name = ${name} RETURNING name`
          if (rows.length > 0) yield* bumpVersion(sql)
          return rows.length > 0
        }),
      )
      if (!removed) return yield* new EventTypeNotFound({ name })
    })
    const list = selectEntries(sql, undefined).pipe(
      Effect.map((rows) => [...builtIn, ...rows].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))),
      Effect.withSpan("EventTypeCatalog.list"),
    )
    return EventTypeCatalog.of({ put, get, list, remove })
  })

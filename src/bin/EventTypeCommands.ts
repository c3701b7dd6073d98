/**
 * `bothy event-types ...`: the event-type catalog from a terminal (`EventTypeCatalog`, as the
 * admin API's `/v1/event-types` uses it), as the operator. `put` replaces a type whole, so a
 * script states every field it wants; JSON flags are read strictly (a bad one is refused, never
 * dropped).
 */
import { Console, Effect, Option, Schema } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { EventTypeJson } from "../admin/EventTypesApi.ts"
import { EventTypeCatalog, type EventTypeEntry, reservedPrefix } from "../log/EventTypeCatalog.ts"
import * as StatusReport from "../ops/StatusReport.ts"
import * as OperationalEvents from "../webhooks/subscriptions/OperationalEvents.ts"
import { json, print, withDatabase } from "./AdminCommandRuntime.ts"

const name = Argument.String("name").pipe(Argument.withDescription("the event type (order.created)"))
const jsonFlag = (flag: string, description: string) =>
  Flag.String(flag).pipe(
    Flag.withDescription(description),
    Flag.withSchema(Schema.fromJsonString(Schema.Json)),
    Flag.optional,
  )

const lines = (t: EventTypeEntry) =>
  [
    ["name", t.name],
    ["description", t.description || "-"],
    [
      "flags",
      [t.validated ? "validated" : "", t.deprecated ? "deprecated" : ""].filter((f) => f !== "").join(", ") || "-",
    ],
    ["schema", t.schema === null ? "none" : JSON.stringify(t.schema)],
    ["example", t.example === null ? "none" : JSON.stringify(t.example)],
  ]
    .map(([k, v]) => `${k!.padEnd(12)} ${v}`)
    .join("\n")

const withCatalog = <A, E>(f: (catalog: EventTypeCatalog["Service"]) => Effect.Effect<A, E>) =>
  withDatabase(Effect.flatMap(EventTypeCatalog.makeWith({ builtIn: OperationalEvents.catalogEntries }), f))

const list = Command.make("list", { json }, ({ json }) =>
  withCatalog((catalog) =>
    Effect.flatMap(catalog.list, (items) =>
      print(Schema.Struct({ items: Schema.Array(EventTypeJson) }), { items }, json, () =>
        [
          StatusReport.grid(
            ["name", "validated", "deprecated", "description"],
            items.map((t) => [t.name, String(t.validated), String(t.deprecated), t.description]),
          ),
          // The built-in bothy.* types are always listed; only the catalog's own turn it on.
          ...(items.every((t) => t.name.startsWith(reservedPrefix))
            ? ["  (the catalog is off: subscriptions may name any type)"]
            : []),
        ].join("\n"),
      ),
    ),
  ),
).pipe(Command.withDescription("List the event-type catalog"))

const show = Command.make("show", { name, json }, ({ name, json }) =>
  withCatalog((catalog) => Effect.flatMap(catalog.get(name), (t) => print(EventTypeJson, t, json, () => lines(t)))),
).pipe(Command.withDescription("Print one event type"))

const put = Command.make(
  "put",
  {
    name,
    description: Flag.String("description").pipe(Flag.withDescription("what the event means"), Flag.withDefault("")),
    schema: jsonFlag("schema", "the payload's JSON Schema (draft 2020-12), as JSON"),
    example: jsonFlag("example", "an example payload, as JSON (it must pass the schema)"),
    deprecated: Flag.Boolean("deprecated").pipe(
      Flag.withDescription("mark it deprecated in the catalog and the OpenAPI document"),
      Flag.withDefault(false),
    ),
    validated: Flag.Boolean("validated").pipe(
      Flag.withDescription("refuse appends of this type whose payload breaks the schema"),
      Flag.withDefault(false),
    ),
    json,
  },
  (flags) =>
    withCatalog((catalog) =>
      Effect.flatMap(
        catalog.put({
          name: flags.name,
          description: flags.description,
          schema: Option.getOrNull(flags.schema),
          example: Option.getOrNull(flags.example),
          deprecated: flags.deprecated,
          validated: flags.validated,
        }),
        (t) => print(EventTypeJson, t, flags.json, () => lines(t)),
      ),
    ),
).pipe(Command.withDescription("Add an event type to the catalog, or replace it whole"))

const remove = Command.make("delete", { name }, ({ name }) =>
  withCatalog((catalog) => Effect.andThen(catalog.remove(name), Console.log(`event type ${name} deleted`))),
).pipe(Command.withDescription("Remove an event type from the catalog"))

export const eventTypes = Command.make("event-types").pipe(
  Command.withDescription("The event-type catalog: names, payload schemas, examples, flags"),
  Command.withSubcommands([list, show, put, remove]),
)

/**
 * The event-type catalog over HTTP (`EventTypeCatalog`): anyone the API lets in reads it (a
 * receiver's developer wants the schemas), only the operator changes it. The OpenAPI document
 * lists the same types under `webhooks` (`ReceiverWebhooks.addTypes`).
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { EventTypeNotFound, InvalidEventType } from "../log/EventTypeCatalog.ts"
import { OperatorOnly } from "./AdminErrors.ts"

/** A catalog entry as the API sends it. */
export const EventTypeJson = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  /** The payload's JSON Schema (draft 2020-12); null: none. */
  schema: Schema.NullOr(Schema.Json),
  example: Schema.NullOr(Schema.Json),
  deprecated: Schema.Boolean,
  /** Appends of the type are checked against the schema. */
  validated: Schema.Boolean,
}).annotate({ identifier: "EventType" })

const nameParam = { name: Schema.String }
const NoType = EventTypeNotFound.pipe(HttpApiSchema.status(404))
const BadType = InvalidEventType.pipe(HttpApiSchema.status(400))

export class EventTypesApi extends HttpApiGroup.make("eventTypes")
  .add(
    HttpApiEndpoint.get("list", "/", { success: Schema.Struct({ items: Schema.Array(EventTypeJson) }) }),
    HttpApiEndpoint.get("get", "/:name", { params: nameParam, success: EventTypeJson, error: NoType }),
    /** Adds the type or replaces it whole (absent fields: empty, null, false). */
    HttpApiEndpoint.put("put", "/:name", {
      params: nameParam,
      payload: Schema.Struct({
        description: Schema.optional(Schema.String),
        schema: Schema.optional(Schema.NullOr(Schema.Json)),
        example: Schema.optional(Schema.NullOr(Schema.Json)),
        deprecated: Schema.optional(Schema.Boolean),
        validated: Schema.optional(Schema.Boolean),
      }),
      success: EventTypeJson,
      error: [BadType, OperatorOnly],
    }),
    HttpApiEndpoint.delete("remove", "/:name", { params: nameParam, error: [NoType, BadType, OperatorOnly] }),
  )
  .prefix("/v1/event-types")
  .annotateMerge(
    OpenApi.annotations({
      title: "event types",
      description:
        "The event-type catalog: each type's description, payload schema, example and flags (changes: operator only)",
    }),
  ) {}

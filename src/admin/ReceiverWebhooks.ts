/**
 * What receivers get, for the admin API's OpenAPI document: one OpenAPI 3.1 `webhooks` entry, the
 * POST bothy makes to a subscription's URL, with the envelope (`WebhookEnvelope.Envelope`) as its
 * body and the Standard Webhooks headers. HttpApi describes only the API's own paths, so this is
 * added by transforming the generated document (`addTo`, the API's `OpenApi.Transform`), the one
 * place the document is changed by hand.
 *
 * The envelope's JSON Schema comes from its `Schema`, so the document cannot drift from what
 * `WebhookEnvelope.body` writes.
 */
import { Duration, Schema } from "effect"
import { defaultLimits } from "../outbound/OutboundSender.ts"
import { Envelope } from "../webhooks/drain/WebhookEnvelope.ts"
import { rotationOverlap } from "../webhooks/subscriptions/WebhookSubscriptions.ts"

/** The name of the `webhooks` entry: every event goes out the same way. */
export const name = "event"

const envelopeDocument = Schema.toJsonSchemaDocument(Envelope)

/** JSON Schema references point at `$defs`; in the OpenAPI document the definitions live in components. */
const inComponents = <A>(value: A): A =>
  JSON.parse(JSON.stringify(value).replaceAll('"#/$defs/', '"#/components/schemas/')) as A

const header = (headerName: string, description: string, example: string) => ({
  name: headerName,
  in: "header",
  required: true,
  description,
  schema: { type: "string" },
  example,
})

const headers = [
  header(
    "webhook-id",
    "The message's id, `msg_<epoch>_<subscription>_<sequence>`: the same on every retry and re-send of one delivery, so use it as the idempotency key",
    "msg_29000000_0b9f6a2e-3c1d-4c5b-9a57-3f1f0f6c2d11_42",
  ),
  header(
    "webhook-timestamp",
    "When this attempt was made, in seconds since the Unix epoch; reject stale ones",
    "1767225600",
  ),
  header(
    "webhook-signature",
    `Space-separated \`v1,<base64 HMAC-SHA256>\` signatures of \`<webhook-id>.<webhook-timestamp>.<body>\`, one per secret: after a rotation the previous secret signs too for ${Duration.format(rotationOverlap)}`,
    "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
  ),
]

/** The spec with the receivers' request under `webhooks` and the envelope among its schemas. */
export const addTo = (spec: Record<string, unknown>): Record<string, unknown> => {
  const components = (spec.components ?? {}) as { readonly schemas?: Record<string, unknown> }
  return {
    ...spec,
    webhooks: {
      ...(spec.webhooks as Record<string, unknown> | undefined),
      [name]: {
        post: {
          operationId: "receiveEvent",
          summary: "One event, delivered to a subscription's URL",
          description: `Signed per Standard Webhooks (https://www.standardwebhooks.com): verify \`webhook-signature\` with the subscription's \`whsec_\` secret before trusting the body. Deliveries of one subscription come one at a time, in order. Answer 2xx to accept; anything else (or no complete answer within ${Duration.format(Duration.fromInputUnsafe(defaultLimits.totalTimeout))}) is retried with backoff, and 410 disables the subscription.`,
          parameters: headers,
          requestBody: {
            required: true,
            content: { "application/json": { schema: inComponents(envelopeDocument.schema) } },
          },
          responses: {
            "2XX": { description: "Accepted: the next delivery follows" },
            "410": { description: "Gone: the subscription is disabled (cause `gone`)" },
            default: { description: "Not accepted: retried later, keeping the same `webhook-id`" },
          },
        },
      },
    },
    components: {
      ...components,
      schemas: { ...components.schemas, ...inComponents(envelopeDocument.definitions) },
    },
  }
}

/** The component name of a type's payload schema (`:` is not allowed in component names). */
export const payloadComponent = (type: string) => `Payload_${type.replaceAll(":", "_")}`

/** `#/$defs/...` inside a type's schema, pointed at the copy in components. */
const rebased = (schema: unknown, component: string): unknown =>
  JSON.parse(JSON.stringify(schema).replaceAll('"#/$defs/', `"#/components/schemas/${component}/$defs/`))

/** The event types a receiver may get, as the catalog (`EventTypeCatalog`) lists them. */
export interface CatalogType {
  readonly name: string
  readonly description: string
  readonly schema: unknown
  readonly example: unknown
  readonly deprecated: boolean
}

/**
 * The spec with one more `webhooks` entry per catalog type: the envelope whose `type` is the
 * type's name and whose `data` is its payload schema (in components, as `Payload_<type>`, with its
 * example), so a generator such as openapi-typescript gives a receiver one type per event type.
 * A type without a schema gets an open `data`.
 */
export const addTypes = (spec: Record<string, unknown>, types: ReadonlyArray<CatalogType>): Record<string, unknown> => {
  const components = (spec.components ?? {}) as { readonly schemas?: Record<string, unknown> }
  const schemas: Record<string, unknown> = { ...components.schemas }
  const webhooks: Record<string, unknown> = { ...(spec.webhooks as Record<string, unknown> | undefined) }
  const generic = (webhooks[name] as { post: Record<string, unknown> } | undefined)?.post ?? {}
  for (const type of types) {
    const component = payloadComponent(type.name)
    schemas[component] = {
      ...(type.schema === null ? {} : (rebased(type.schema, component) as object)),
      ...(type.example === null ? {} : { examples: [type.example] }),
    }
    webhooks[type.name] = {
      post: {
        ...generic,
        operationId: `receive_${component}`,
        summary: type.description === "" ? `An event of type ${type.name}` : type.description,
        deprecated: type.deprecated,
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: {
                allOf: [
                  inComponents(envelopeDocument.schema),
                  {
                    type: "object",
                    required: ["type", "data"],
                    properties: { type: { const: type.name }, data: { $ref: `#/components/schemas/${component}` } },
                  },
                ],
              },
            },
          },
        },
      },
    }
  }
  return { ...spec, webhooks, components: { ...components, schemas } }
}

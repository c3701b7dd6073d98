import { assert, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect, Layer, Option, Redacted } from "effect"
import { AdminApi } from "../../src/admin/AdminApi.ts"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as ReceiverWebhooks from "../../src/admin/ReceiverWebhooks.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import { Envelope } from "../../src/webhooks/drain/WebhookEnvelope.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestPush from "../support/TestPush.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = TestWebhooks.layer().pipe(Layer.provideMerge(PushConfig.layerWith(TestPush.settings())))

/** Every endpoint of the API definition as the document names it: `get /v1/subscriptions/{id}`. */
const endpointsOf = () =>
  Object.values(AdminApi.groups).flatMap((group) =>
    Object.values(group.endpoints).map(
      (endpoint) => `${endpoint.method.toLowerCase()} ${endpoint.path.replace(/:(\w+)/g, "{$1}")}`,
    ),
  )

layer(Live, { excludeTestServices: true })("the OpenAPI document", (it) => {
  it.effect(
    "OpenApiDocumentIsValid: /openapi.json parses as OpenAPI 3.1, lists every endpoint, and describes the receivers' envelope and headers under webhooks; /docs works offline",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make("t"))))
        const served = yield* TestAdmin.call(base, "GET", "/openapi.json")
        assert.strictEqual(served.status, 200)
        const doc = served.body
        assert.strictEqual(doc.openapi, "3.1.0")

        const validator = new Validator()
        const result = yield* Effect.promise(() => validator.validate(doc))
        assert.isTrue(result.valid, JSON.stringify(result.errors, null, 2))
        assert.strictEqual(validator.version, "3.1")
        // The validator does refuse what 3.1 does not allow: a webhook without an operation object.
        const broken = yield* Effect.promise(() =>
          new Validator().validate({ ...doc, webhooks: { [ReceiverWebhooks.name]: { post: { responses: 42 } } } }),
        )
        assert.isFalse(broken.valid)
        // Every reference resolves.
        const resolved = validator.resolveRefs() as typeof doc

        const listed = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([path, item]) =>
          Object.keys(item).map((method) => `${method} ${path}`),
        )
        const expected = endpointsOf()
        assert.strictEqual(expected.length, 41)
        assert.sameMembers(listed, expected)
        for (const path of [
          "post /v1/subscriptions/{id}/recover",
          "post /v1/recoveries",
          "get /v1/recoveries/{id}",
          "post /v1/deliveries/{id}/resend",
          "get /v1/jobs/counts",
          "get /v1/subscriptions/{id}/feed",
        ]) {
          assert.include(listed, path)
        }
        assert.deepStrictEqual(Object.keys(doc.components.securitySchemes), ["bearer"])
        // A subscription's counter is `lastSequence`; `sequence` is the number each delivery carries.
        const { Subscription, Delivery } = doc.components.schemas
        assert.include(Subscription.required, "lastSequence")
        assert.notProperty(Subscription.properties, "sequence")
        assert.property(Delivery.properties, "sequence")

        // What receivers get: the envelope's fields and the Standard Webhooks headers.
        const receive = resolved.webhooks[ReceiverWebhooks.name].post
        const schema = receive.requestBody.content["application/json"].schema
        assert.sameMembers(Object.keys(schema.properties), Object.keys(Envelope.fields))
        assert.sameMembers(schema.required, Object.keys(Envelope.fields))
        assert.deepStrictEqual(schema.properties.version, {
          type: "number",
          enum: [1],
          description: schema.properties.version.description,
        })
        assert.sameMembers(
          receive.parameters.map((p: { name: string; in: string }) => `${p.in}:${p.name}`),
          ["header:webhook-id", "header:webhook-timestamp", "header:webhook-signature"],
        )
        assert.property(doc.components.schemas, "WebhookEnvelope")

        // The docs page carries its script: nothing is loaded from elsewhere.
        const docs = yield* TestAdmin.call(base, "GET", "/docs")
        assert.strictEqual(docs.status, 200)
        assert.match(docs.headers.get("content-type") ?? "", /text\/html/)
        assert.isAbove(docs.body.length, 1_000_000)
        assert.notMatch(docs.body, /<script[^>]+src=["']https?:/)
      }),
  )
})

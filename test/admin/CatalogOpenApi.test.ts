/**
 * The event-type catalog through the admin API, and what a receiver's developer gets from it: the
 * served OpenAPI document lists each type under `webhooks` with its payload schema, and a
 * generator nobody here wrote (openapi-typescript) turns it into types that a receiver's code
 * compiles against (strict `tsc`), with the payload's fields typed as the schema says.
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect, Option, Redacted } from "effect"
import openapiTS from "openapi-typescript"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as TestAdmin from "../support/TestAdmin.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const order = {
  description: "An order was placed",
  schema: {
    type: "object",
    required: ["amount", "lines"],
    properties: {
      amount: { type: "number", minimum: 0 },
      lines: { type: "array", items: { $ref: "#/$defs/line" } },
      note: { type: "string" },
    },
    $defs: { line: { type: "object", required: ["sku"], properties: { sku: { type: "string" } } } },
  },
  example: { amount: 12.5, lines: [{ sku: "sku-1" }] },
  validated: true,
}

/** A receiver's module, written against the generated types. */
const receiver = `
import type { webhooks } from "./schema.js"

type Body<T extends keyof webhooks> = NonNullable<webhooks[T]["post"]["requestBody"]>["content"]["application/json"]

export const total = (body: Body<"order.created">): number => {
  const type: "order.created" = body.type
  const skus: Array<string> = body.data.lines.map((line) => line.sku)
  const note: string | undefined = body.data.note
  return body.data.amount + skus.length + type.length + (note?.length ?? 0) + body.sequence
}

export const wrong = (body: Body<"order.created">) => {
  // @ts-expect-error amount is a number in the schema
  const amount: string = body.data.amount
  return amount
}

export const signup = (body: Body<"user:signed-up">): unknown => body.data
`

const tsc = (dir: string) => {
  const bin = join(import.meta.dirname, "..", "..", "node_modules", "typescript", "bin", "tsc")
  try {
    execFileSync(
      process.execPath,
      [
        bin,
        "--noEmit",
        "--strict",
        "--target",
        "es2022",
        "--module",
        "nodenext",
        "--moduleResolution",
        "nodenext",
      ].concat(["--exactOptionalPropertyTypes", join(dir, "receiver.ts")]),
      { encoding: "utf8", stdio: "pipe", cwd: dir },
    )
    return ""
  } catch (e) {
    const failed = e as { stdout?: string; stderr?: string }
    return `${failed.stdout ?? ""}${failed.stderr ?? ""}` || String(e)
  }
}

layer(TestWebhooks.layer(), { excludeTestServices: true })("the event-type catalog in the API", (it) => {
  it.effect(
    "CatalogPublishesSchemasInOpenApi: types put through the API are listed under webhooks with their schemas; openapi-typescript's receiver types compile",
    () =>
      Effect.gen(function* () {
        const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make("t"))))
        const put = (name: string, body: unknown) =>
          TestAdmin.call(base, "PUT", `/v1/event-types/${name}`, { token: "t", body })
        assert.strictEqual((yield* put("order.created", order)).status, 200)
        assert.strictEqual((yield* put("user:signed-up", { deprecated: true })).status, 200)
        const bad = yield* put("x.bad", { schema: { type: "object" }, example: 3 })
        assert.strictEqual(bad.status, 400)
        assert.strictEqual(bad.body.field, "example")
        const listed = yield* TestAdmin.call(base, "GET", "/v1/event-types", { token: "t" })
        assert.deepStrictEqual(
          listed.body.items.map((t: { name: string }) => t.name),
          [
            "bothy.delivery.dead",
            "bothy.subscription.degraded",
            "bothy.subscription.disabled",
            "bothy.subscription.recovered",
            "bothy.subscription.test",
            "order.created",
            "user:signed-up",
          ],
          "bothy's own operational event types are built in",
        )

        const served = yield* TestAdmin.call(base, "GET", "/openapi.json")
        assert.strictEqual(served.status, 200)
        const doc = served.body
        const validator = new Validator()
        const result = yield* Effect.promise(() => validator.validate(doc))
        assert.isTrue(result.valid, JSON.stringify(result.errors, null, 2))
        assert.includeMembers(Object.keys(doc.webhooks), [
          "event",
          "order.created",
          "user:signed-up",
          "bothy.subscription.disabled",
        ])
        assert.isTrue(doc.webhooks["user:signed-up"].post.deprecated)
        const payload = doc.components.schemas["Payload_order.created"]
        assert.deepStrictEqual(payload.properties.amount, order.schema.properties.amount)
        assert.deepStrictEqual(payload.examples, [order.example])
        assert.strictEqual(payload.properties.lines.items.$ref, "#/components/schemas/Payload_order.created/$defs/line")

        const generated = yield* Effect.promise(() => openapiTS(doc))
        const dir = mkdtempSync(join(tmpdir(), "bothy-receiver-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
        writeFileSync(join(dir, "schema.d.ts"), generated)
        writeFileSync(join(dir, "receiver.ts"), receiver)
        writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module" }))
        assert.strictEqual(tsc(dir), "", "the receiver compiles against the generated types")

        // The check has teeth: a receiver that reads a field the schema lacks does not compile.
        writeFileSync(
          join(dir, "receiver.ts"),
          `${receiver}\nexport const missing = (b: Body<"order.created">) => b.data.total\n`,
        )
        assert.match(tsc(dir), /Property 'total' does not exist/)
      }),
  )
})

/**
 * The event-type catalog: validated types refuse bad payloads at append (naming the payload's
 * field and the schema's path, appending nothing), also in a process whose cache predates the
 * change; entries are checked when written; and with the catalog on, subscriptions name only its
 * types or patterns that match one.
 */
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Exit, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as EventTypeCatalogModule from "../../src/log/EventTypeCatalog.ts"
import { EventTypeCatalog } from "../../src/log/EventTypeCatalog.ts"
import { makeAjv } from "../../src/log/EventTypeValidation.ts"
import * as OperationalEvents from "../../src/webhooks/subscriptions/OperationalEvents.ts"
import { WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = EventTypeCatalog.layer.pipe(Layer.provideMerge(TestWebhooks.layer()))

const order = {
  name: "order.created",
  description: "An order was placed",
  schema: {
    type: "object",
    required: ["amount"],
    properties: { amount: { type: "number", minimum: 0 }, items: { type: "array", items: { type: "string" } } },
  },
  example: { amount: 12.5, items: ["sku-1"] },
  validated: true,
}

const event = (type: string, payload: NewEvent["payload"]): NewEvent => ({ space: "cat", type, actor: "t", payload })

const failure = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isFailure(exit) && exit.cause.reasons[0]?._tag === "Fail"
    ? (exit.cause.reasons[0].error as Record<string, unknown>)
    : undefined

const head = Effect.flatMap(EventLog, (log) => Effect.map(log.head, (h) => h.seq))

/** An `EventLog` of its own (another process's cache), on the same pool. */
const otherLog = (mode: "counter" | "post_commit") =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const context = yield* Layer.build(
      (mode === "counter" ? EventLog.layer : EventLog.layerPostCommit).pipe(
        Layer.provide(Layer.succeed(SqlClient.SqlClient, sql)),
      ),
    )
    return Context.get(context, EventLog)
  })

layer(Live, { excludeTestServices: true })("EventTypeCatalog", (it) => {
  it.effect(
    "CatalogRejectsInvalidPayloadAtAppend: a validated type's bad payload is InvalidEvent naming the schema path; the batch appends nothing",
    () =>
      Effect.gen(function* () {
        const catalog = yield* EventTypeCatalog
        const log = yield* EventLog
        // Loaded before the type is validated: the guard must see the change.
        const counter = yield* otherLog("counter")
        const pending = yield* otherLog("post_commit")
        yield* counter.append([event("order.created", { amount: "cached before" })])
        yield* pending.append([event("order.created", { amount: "cached before" })])

        yield* catalog.put(order)
        assert.deepStrictEqual(yield* catalog.get("order.created"), { ...order, deprecated: false })
        const before = yield* head
        for (const appender of [log, counter, pending]) {
          const error = failure(
            yield* Effect.exit(
              appender.append([event("note.added", { any: 1 }), event("order.created", { amount: "12" })]),
            ),
          )
          assert.deepInclude(error, {
            _tag: "InvalidEvent",
            index: 1,
            reason: "SchemaMismatch",
            field: "payload.amount",
            schemaPath: "#/properties/amount/type",
          })
          const nested = failure(
            yield* Effect.exit(appender.append([event("order.created", { amount: 1, items: ["a", 2] })])),
          )
          assert.deepInclude(nested, { field: "payload.items[1]", schemaPath: "#/properties/items/items/type" })
          const missing = failure(yield* Effect.exit(appender.append([event("order.created", {})])))
          assert.deepInclude(missing, { field: "payload", schemaPath: "#/required" })
        }
        assert.strictEqual(yield* head, before, "nothing appended")

        yield* log.append([event("order.created", { amount: 3 })])
        yield* counter.append([event("order.created", order.example)])
        assert.strictEqual(yield* head, before + 2n)

        // Described but not validated: the schema is documentation only.
        yield* catalog.put({ ...order, validated: false })
        yield* counter.append([event("order.created", { amount: "free" })])
        assert.strictEqual(yield* head, before + 3n)
      }),
  )

  it.effect("a catalog entry is checked when written: the schema compiles, the example passes it", () =>
    Effect.gen(function* () {
      const catalog = yield* EventTypeCatalog
      const cases: ReadonlyArray<readonly [unknown, string]> = [
        [{ name: "a b" }, "name"],
        [{ name: "x.bad", schema: { type: "nope" } }, "schema"],
        [{ name: "x.bad", schema: { type: "object" }, example: [] }, "example"],
        [{ name: "x.bad", validated: true }, "validated"],
      ]
      for (const [input, field] of cases) {
        const error = failure(yield* Effect.exit(catalog.put(input as typeof order)))
        assert.deepInclude(error, { _tag: "InvalidEventType", field }, JSON.stringify(input))
      }
      const missing = failure(yield* Effect.exit(catalog.get("x.bad")))
      assert.deepInclude(missing, { _tag: "EventTypeNotFound" })
    }),
  )
})

layer(Live, { excludeTestServices: true })("EventTypeCatalog and subscriptions", (it) => {
  it.effect(
    "SubscriptionNamesOnlyKnownTypes: with the catalog on, a subscription names only its types or patterns matching one",
    () =>
      Effect.gen(function* () {
        const catalog = yield* EventTypeCatalog
        const subscriptions = yield* WebhookSubscriptions
        const create = (eventTypes: ReadonlyArray<string>) =>
          Effect.exit(subscriptions.create({ owner: "known", url: "https://8.8.8.8/h", eventTypes, scope: ["s"] }))
        assert.isTrue(Exit.isSuccess(yield* create(["anything.at.all"])), "the catalog is off while empty")

        yield* catalog.put({ name: "order.created" })
        yield* catalog.put({ name: "order.item.added", deprecated: true })
        for (const names of [["order.created"], ["order.*"], ["order.item.*", "order.created"], ["*"], []]) {
          assert.isTrue(Exit.isSuccess(yield* create(names)), names.join(","))
        }
        for (const [names, field] of [
          [["order.created", "order.deleted"], "eventTypes[1]"],
          [["invoice.*"], "eventTypes[0]"],
          [["order.created.*"], "eventTypes[0]"],
        ] as const) {
          assert.deepInclude(failure(yield* create(names)), { _tag: "InvalidSubscription", field }, names.join(","))
        }
        const { id } = yield* subscriptions.create({
          owner: "known",
          url: "https://8.8.8.8/h",
          eventTypes: ["order.*"],
          scope: ["s"],
        })
        const update = failure(yield* Effect.exit(subscriptions.update(id, { eventTypes: ["refund.issued"] })))
        assert.deepInclude(update, { _tag: "InvalidSubscription", field: "eventTypes[0]" })
        assert.deepStrictEqual((yield* subscriptions.get(id)).eventTypes, ["order.*"], "the update wrote nothing")
      }),
  )

  it.effect(
    "OperationalEventTypesBuiltIn: the bothy.* types are listed with schemas whose examples pass, never turn the catalog on, and cannot be put or removed",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`DELETE FROM event_types`
        const catalog = yield* EventTypeCatalog.makeWith({ builtIn: OperationalEvents.catalogEntries })
        const listed = yield* catalog.list
        assert.deepStrictEqual(
          listed.map((t) => t.name),
          [...OperationalEvents.names].sort(),
        )
        const ajv = makeAjv()
        for (const t of listed) {
          assert.isNotNull(t.schema, t.name)
          assert.isTrue(ajv.compile(t.schema as object)(t.example), `${t.name}: its example passes its schema`)
        }
        assert.strictEqual(
          (yield* catalog.get(OperationalEvents.subscriptionDegraded)).name,
          "bothy.subscription.degraded",
        )
        assert.deepStrictEqual(
          yield* EventTypeCatalogModule.knownNames,
          [],
          "built-ins are no rows: the catalog is off",
        )
        const subscriptions = yield* WebhookSubscriptions
        const create = (eventTypes: ReadonlyArray<string>) =>
          Effect.exit(subscriptions.create({ owner: "ops", url: "https://8.8.8.8/h", eventTypes, scope: ["ops"] }))
        assert.isTrue(Exit.isSuccess(yield* create(["anything.at.all"])), "still off")
        yield* catalog.put({ name: "order.created" })
        assert.isTrue(Exit.isSuccess(yield* create(["bothy.*"])), "with the catalog on, bothy.* is known")
        assert.isTrue(Exit.isSuccess(yield* create(["bothy.subscription.disabled", "order.created"])))
        for (const attempt of [
          catalog.put({ name: "bothy.subscription.disabled" }),
          catalog.put({ name: "bothy.mine" }),
          catalog.remove("bothy.subscription.recovered"),
        ]) {
          assert.deepInclude(failure(yield* Effect.exit(attempt)), { _tag: "InvalidEventType", field: "name" })
        }
      }),
  )
})

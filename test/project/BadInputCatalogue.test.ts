/**
 * Every kind of bad input the issue names, against the real services on a real database: each
 * case asserts the exact typed error (its tag, the field it names, its reason where it has one)
 * and that nothing was written (the rows of every table an input could reach, and the log head).
 */
import { randomBytes } from "node:crypto"
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, layer } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Layer, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import { InvalidJob, type JobInsert, Jobs, maxUniqueKeyLength } from "../../src/jobs/Jobs.ts"
import { InvalidEvent, maxPayloadBytes, maxPayloadDepth, type NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { UnsafeWebhookTarget } from "../../src/outbound/OutboundTarget.ts"
import { BothyConfig, defaults, InvalidConfig, load, type Settings } from "../../src/platform/BothyConfig.ts"
import * as Database from "../../src/platform/Database.ts"
import {
  InvalidSubscription,
  maxEventTypes,
  maxScope,
  type NewSubscription,
  WebhookSubscriptions,
} from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as WebhookConfig from "../../src/webhooks/WebhookConfig.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

interface Case {
  readonly name: string
  readonly attempt: Effect.Effect<unknown, unknown, EventLog | Jobs | WebhookSubscriptions>
  readonly tag: string
  /** The field the error names; for `InvalidConfig`, its keys joined by a space. */
  readonly field: string | undefined
  readonly reason?: string
}

const fieldOf = (error: unknown): string | undefined => {
  if (error instanceof InvalidEvent || error instanceof InvalidJob || error instanceof InvalidSubscription) {
    return error.field
  }
  if (error instanceof InvalidConfig) return error.keys.join(" ")
  if (error instanceof UnsafeWebhookTarget) return "url"
  return `not an input error: ${String(error)}`
}

const reasonOf = (error: unknown): string | undefined =>
  error instanceof InvalidEvent || error instanceof UnsafeWebhookTarget ? error.reason : undefined

// --- events ---

const goodEvent = { space: "cat-space", type: "item.created", actor: "cat-actor", payload: { ok: true } }
const append = (events: ReadonlyArray<unknown>) =>
  Effect.flatMap(EventLog, (log) => log.append(events as ReadonlyArray<NewEvent>))
const withEvent = (fields: Record<string, unknown>) => append([{ ...goodEvent, ...fields }])
const withPayload = (payload: unknown) => withEvent({ payload })

/** `depth` objects nested in each other: `{a:{a:{}}}` is 3. */
const nested = (depth: number): Schema.Json => {
  let value: Schema.Json = {}
  for (let i = 1; i < depth; i++) value = { a: value }
  return value
}
const nestedField = (root: string, depth: number) => `${root}${".a".repeat(depth - 1)}`

const cyclic: Record<string, unknown> = {}
cyclic.self = cyclic

// 1,000 references to one array of 1,000 numbers: a few kilobytes in memory, a million values as
// JSON. The walk counts each array's values as it meets them and stops at the 61st.
const shared = Array.from({ length: 1000 }, (_, i) => i)
const expanding = Array.from({ length: 1000 }, () => shared)

const eventCase = (name: string, attempt: Case["attempt"], field: string | undefined, reason: string): Case => ({
  name,
  attempt,
  tag: "InvalidEvent",
  field,
  reason,
})

const eventCases: ReadonlyArray<Case> = [
  eventCase("empty batch", append([]), undefined, "EmptyBatch"),
  eventCase("not an object", append(["event"]), "", "Malformed"),
  eventCase("empty type", withEvent({ type: "" }), "type", "Malformed"),
  eventCase("type with a space", withEvent({ type: "item created" }), "type", "Malformed"),
  eventCase("type with a NUL", withEvent({ type: "item\u0000" }), "type", "Malformed"),
  eventCase("overlong type", withEvent({ type: "t".repeat(201) }), "type", "Malformed"),
  eventCase("empty space", withEvent({ space: "" }), "space", "Malformed"),
  eventCase("NUL in space", withEvent({ space: "a\u0000b" }), "space", "Malformed"),
  eventCase("lone high surrogate in space", withEvent({ space: "a\ud800" }), "space", "Malformed"),
  eventCase("lone low surrogate in space", withEvent({ space: "\udc00a" }), "space", "Malformed"),
  eventCase("overlong space", withEvent({ space: "s".repeat(201) }), "space", "Malformed"),
  eventCase("missing actor", append([{ space: "s", type: "t", payload: {} }]), "actor", "Malformed"),
  eventCase("NUL in actor", withEvent({ actor: "\u0000" }), "actor", "Malformed"),
  eventCase("lone surrogate in actor", withEvent({ actor: "user\udbff" }), "actor", "Malformed"),
  eventCase("bigint payload", withPayload({ n: 1n }), "payload", "Malformed"),
  eventCase("NaN payload", withPayload([Number.NaN]), "payload", "Malformed"),
  eventCase("undefined in payload", withPayload({ n: undefined }), "payload", "Malformed"),
  eventCase("Date in payload", withPayload({ at: new Date() }), "payload", "Malformed"),
  eventCase("cyclic payload", withPayload(cyclic), "payload", "Malformed"),
  eventCase(
    "NUL in a nested payload string",
    withPayload({ order: { note: "a\u0000" } }),
    "payload.order.note",
    "PayloadNotStorable",
  ),
  eventCase(
    "NUL in a payload key",
    withPayload({ fine: 1, "k\u0000": 1 }),
    `payload[${JSON.stringify("k\u0000")}]`,
    "PayloadNotStorable",
  ),
  eventCase(
    "lone surrogate in a payload array",
    withPayload({ list: ["a", "b", "\ud83d"] }),
    "payload.list[2]",
    "PayloadNotStorable",
  ),
  eventCase(
    "lone surrogate in a nested payload key",
    withPayload({ a: [{ "\udfff": true }] }),
    `payload.a[0][${JSON.stringify("\udfff")}]`,
    "PayloadNotStorable",
  ),
  eventCase(
    `payload one level deeper than ${maxPayloadDepth}`,
    withPayload(nested(maxPayloadDepth + 1)),
    nestedField("payload", maxPayloadDepth + 1),
    "PayloadTooDeep",
  ),
  eventCase(
    "payload nested 10,000 levels (was a RangeError defect)",
    withPayload(nested(10_000)),
    nestedField("payload", maxPayloadDepth + 1),
    "PayloadTooDeep",
  ),
  eventCase("oversized payload", withPayload({ blob: "x".repeat(maxPayloadBytes) }), "payload", "PayloadTooLarge"),
  eventCase("payload sharing one array a thousand times", withPayload(expanding), "payload[60]", "PayloadTooLarge"),
  eventCase(
    "one bad event after good ones refuses the batch",
    append([goodEvent, goodEvent, { ...goodEvent, space: "x\u0000" }]),
    "space",
    "Malformed",
  ),
]

// --- subscriptions ---

const goodSubscription = { owner: "cat-owner", url: "https://8.8.8.8/hook", eventTypes: [], scope: ["cat-space"] }
const create = (fields: Record<string, unknown>) =>
  Effect.flatMap(WebhookSubscriptions, (w) =>
    w.create({ ...goodSubscription, ...fields } as unknown as NewSubscription),
  )
const many = (n: number, name: (i: number) => string) => Array.from({ length: n }, (_, i) => name(i))

const subscriptionCase = (name: string, fields: Record<string, unknown>, field: string): Case => ({
  name,
  attempt: create(fields),
  tag: "InvalidSubscription",
  field,
})

const subscriptionCases: ReadonlyArray<Case> = [
  {
    name: "not an object",
    attempt: Effect.flatMap(WebhookSubscriptions, (w) => w.create("subscription" as unknown as NewSubscription)),
    tag: "InvalidSubscription",
    field: "",
  },
  subscriptionCase("empty owner", { owner: "" }, "owner"),
  subscriptionCase("NUL in owner", { owner: "own\u0000er" }, "owner"),
  subscriptionCase("lone surrogate in owner (was stored as U+FFFD)", { owner: "owner\ud800" }, "owner"),
  subscriptionCase("overlong owner", { owner: "o".repeat(201) }, "owner"),
  subscriptionCase("empty url", { url: "" }, "url"),
  subscriptionCase("NUL in url", { url: "https://8.8.8.8/\u0000" }, "url"),
  {
    name: "http url",
    attempt: create({ url: "http://8.8.8.8/hook" }),
    tag: "UnsafeWebhookTarget",
    field: "url",
    reason: "HttpNotAllowed",
  },
  {
    name: "private url",
    attempt: create({ url: "https://10.0.0.1/hook" }),
    tag: "UnsafeWebhookTarget",
    field: "url",
    reason: "BlockedAddress",
  },
  subscriptionCase("event type with a space", { eventTypes: ["a b"] }, "eventTypes[0]"),
  subscriptionCase("wildcard inside a segment", { eventTypes: ["order.*", "order*"] }, "eventTypes[1]"),
  subscriptionCase("filter with two operators", { filter: { path: "$.a", eq: 1, gt: 0 } }, "filter"),
  subscriptionCase("filter path without $", { filter: { or: [{ path: "a", eq: 1 }] } }, "filter.or[0].path"),
  subscriptionCase("empty event type", { eventTypes: [""] }, "eventTypes[0]"),
  subscriptionCase("NUL in an event type", { eventTypes: ["a\u0000"] }, "eventTypes[0]"),
  subscriptionCase("lone surrogate in an event type", { eventTypes: ["ok", "\udc00"] }, "eventTypes[1]"),
  subscriptionCase(
    `${maxEventTypes + 1} event types`,
    { eventTypes: many(maxEventTypes + 1, (i) => `t${i}`) },
    "eventTypes",
  ),
  subscriptionCase("empty scope", { scope: [] }, "scope"),
  subscriptionCase("empty space in scope", { scope: ["a", ""] }, "scope[1]"),
  subscriptionCase("NUL in a space", { scope: ["a\u0000"] }, "scope[0]"),
  subscriptionCase("lone surrogate in a space (was stored as U+FFFD)", { scope: ["ok", "x\ud800y"] }, "scope[1]"),
  subscriptionCase("overlong space", { scope: ["s".repeat(201)] }, "scope[0]"),
  subscriptionCase(`${maxScope + 1} spaces`, { scope: many(maxScope + 1, (i) => `space-${i}`) }, "scope"),
  subscriptionCase(
    "40,000 spaces (was: bind parameter count exceeds 32767)",
    { scope: many(40_000, (i) => `space-${i}`) },
    "scope",
  ),
  subscriptionCase("zero rate limit", { rateLimit: 0 }, "rateLimit"),
  subscriptionCase("infinite rate limit", { rateLimit: Number.POSITIVE_INFINITY }, "rateLimit"),
  subscriptionCase("rate limit as text", { rateLimit: "5" }, "rateLimit"),
  subscriptionCase(
    "a signature header",
    { headers: { "Webhook-Signature": "v1,forged" } },
    'headers["Webhook-Signature"]',
  ),
  subscriptionCase("a webhook-* header", { headers: { "webhook-anything": "x" } }, 'headers["webhook-anything"]'),
  subscriptionCase("content-type", { headers: { "content-type": "text/plain" } }, 'headers["content-type"]'),
  subscriptionCase("a name that is no token", { headers: { "x key": "v" } }, 'headers["x key"]'),
  subscriptionCase(
    "CRLF in a value (header smuggling)",
    { headers: { "x-key": "v\r\nwebhook-id: x" } },
    'headers["x-key"]',
  ),
  subscriptionCase("a header spelled twice", { headers: { "X-Key": "a", "x-key": "b" } }, "headers"),
  subscriptionCase(
    "21 headers",
    { headers: Object.fromEntries(many(21, (i) => `x-h${i}`).map((name) => [name, "v"])) },
    "headers",
  ),
]

// --- job inserts ---

const goodJob = { kind: "catalogue.job", args: { n: 1 } }
const insert = (jobs: ReadonlyArray<unknown>) => Effect.flatMap(Jobs, (j) => j.insert(jobs as ReadonlyArray<JobInsert>))
const jobCase = (name: string, fields: Record<string, unknown>, field: string): Case => ({
  name,
  attempt: insert([{ ...goodJob, ...fields }]),
  tag: "InvalidJob",
  field,
})

const jobCases: ReadonlyArray<Case> = [
  { name: "not an object", attempt: insert([42]), tag: "InvalidJob", field: "" },
  jobCase("empty kind", { kind: "" }, "kind"),
  jobCase("NUL in kind", { kind: "job\u0000" }, "kind"),
  jobCase("lone surrogate in kind", { kind: "\ud800job" }, "kind"),
  jobCase("overlong kind", { kind: "k".repeat(129) }, "kind"),
  jobCase("NUL in queue", { queue: "q\u0000" }, "queue"),
  jobCase("empty queue", { queue: "" }, "queue"),
  jobCase("NUL in a nested args string", { args: { to: ["ok", "a\u0000"] } }, "args.to[1]"),
  jobCase("NUL in an args key", { args: { "k\u0000": 1 } }, `args[${JSON.stringify("k\u0000")}]`),
  jobCase(
    "lone surrogate in a nested args key",
    { args: { a: { "b\udbff": 1 } } },
    `args.a[${JSON.stringify("b\udbff")}]`,
  ),
  jobCase("lone surrogate in an args string", { args: ["\udc00"] }, "args[0]"),
  jobCase(`args one level deeper than ${maxPayloadDepth}`, { args: nested(65) }, nestedField("args", 65)),
  jobCase("args nested 10,000 levels", { args: nested(10_000) }, nestedField("args", 65)),
  jobCase("bigint args", { args: { n: 1n } }, "args"),
  jobCase("missing args", { args: undefined }, "args"),
  jobCase("empty unique key", { uniqueKey: "" }, "uniqueKey"),
  jobCase("NUL in unique key", { uniqueKey: "u\u0000" }, "uniqueKey"),
  jobCase("lone surrogate in unique key", { uniqueKey: "u\ud800" }, "uniqueKey"),
  jobCase(
    "overlong unique key (an index entry too large)",
    { uniqueKey: "u".repeat(maxUniqueKeyLength + 1) },
    "uniqueKey",
  ),
  jobCase("NUL in trace parent", { traceParent: "00-\u0000" }, "traceParent"),
  jobCase("priority 5", { priority: 5 }, "priority"),
  jobCase("max attempts 0", { maxAttempts: 0 }, "maxAttempts"),
  jobCase("invalid date", { scheduledAt: new Date(Number.NaN) }, "scheduledAt"),
  jobCase("a date PostgreSQL cannot hold", { scheduledAt: new Date(-8.64e15) }, "scheduledAt"),
  {
    name: "one bad job after good ones refuses the batch",
    attempt: insert([goodJob, goodJob, { ...goodJob, args: { s: "\u0000" } }]),
    tag: "InvalidJob",
    field: "args.s",
  },
]

// --- config ---

const env = (vars: Record<string, string>) =>
  Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: vars, preserveEmptyStrings: true })))
const settingCase = (vars: Record<string, string>, field: string): Case => ({
  name: Object.entries(vars)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(" "),
  attempt: load.pipe(env(vars)),
  tag: "InvalidConfig",
  field,
})
const webhookCase = (vars: Record<string, string>, field: string): Case => ({
  ...settingCase(vars, field),
  attempt: WebhookConfig.load(Effect.succeed(TestWebhooks.secretKey())).pipe(env(vars)),
})

const hostSettings = (cooldown: Duration.Duration): Settings => ({
  consumer: {
    batchSize: 500,
    pollInterval: Duration.seconds(1),
    cooldown,
    pendingAlertAfter: Duration.hours(1),
  },
  sync: { eventRetention: Duration.days(7) },
})

// Written by the test before the cases run: a valid key, refused only for its mode.
const keyFolder = mkdtempSync(join(tmpdir(), "bothy-catalogue-"))
const openKeyFile = join(keyFolder, "webhook-secret-key")
const openKey = `${randomBytes(32).toString("base64")}\n`

const configCases: ReadonlyArray<Case> = [
  settingCase({ BOTHY_CONSUMER_BATCH_SIZE: "" }, "consumer.batch_size"),
  settingCase({ BOTHY_CONSUMER_POLL_INTERVAL: "   " }, "consumer.poll_interval"),
  settingCase({ BOTHY_SYNC_EVENT_RETENTION: "" }, "sync.event_retention"),
  settingCase({ BOTHY_CONSUMER_POLL_INTERVAL: "5ms" }, "consumer.poll_interval"),
  settingCase({ BOTHY_CONSUMER_POLL_INTERVAL: "11m" }, "consumer.poll_interval"),
  settingCase({ BOTHY_CONSUMER_POLL_INTERVAL: "99999999999999999999999d" }, "consumer.poll_interval"),
  settingCase({ BOTHY_CONSUMER_COOLDOWN: "7d" }, "consumer.cooldown"),
  settingCase({ BOTHY_CONSUMER_COOLDOWN: "1s" }, "consumer.cooldown consumer.poll_interval"),
  settingCase(
    { BOTHY_CONSUMER_COOLDOWN: "600ms", BOTHY_CONSUMER_POLL_INTERVAL: "500ms" },
    "consumer.cooldown consumer.poll_interval",
  ),
  settingCase({ BOTHY_CONSUMER_PENDING_ALERT_AFTER: "30s" }, "consumer.pending_alert_after"),
  settingCase(
    { BOTHY_CONSUMER_PENDING_ALERT_AFTER: "31d", BOTHY_SYNC_EVENT_RETENTION: "60d" },
    "consumer.pending_alert_after",
  ),
  settingCase({ BOTHY_SYNC_EVENT_RETENTION: "12h" }, "sync.event_retention"),
  settingCase({ BOTHY_SYNC_EVENT_RETENTION: "3651d" }, "sync.event_retention"),
  settingCase({ BOTHY_LOG_SEQUENCING: "sequence" }, "log.sequencing"),
  {
    name: "DATABASE_URL set but empty",
    attempt: Database.external.pipe(env({ DATABASE_URL: "" })),
    tag: "InvalidConfig",
    field: "DATABASE_URL",
  },
  {
    name: "BOTHY_HOME set but empty",
    attempt: Database.home.pipe(env({ BOTHY_HOME: "" })),
    tag: "InvalidConfig",
    field: "home",
  },
  {
    name: "BOTHY_WEBHOOK_SECRET_KEY set but empty",
    attempt: SecretBox.loadKey.pipe(env({ BOTHY_WEBHOOK_SECRET_KEY: "" })),
    tag: "InvalidConfig",
    field: "webhook.secret_key",
  },
  webhookCase({ BOTHY_WEBHOOK_ALLOW_CIDRS: "10.0.0.0/33" }, "webhook.allow_cidrs"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_CIDRS: "10.0.0.0/8, nonsense" }, "webhook.allow_cidrs"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_CIDRS: "" }, "webhook.allow_cidrs"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_HOSTS: "*.example.com" }, "webhook.allow_hosts"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_HOSTS: "example.com:8443" }, "webhook.allow_hosts"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_HOSTS: "https://example.com" }, "webhook.allow_hosts"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "" }, "webhook.allow_http_loopback"),
  webhookCase({ BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "maybe" }, "webhook.allow_http_loopback"),
  {
    name: "a key file readable by others",
    attempt: WebhookConfig.keyOrFile(openKeyFile).pipe(env({})),
    tag: "InvalidConfig",
    field: "webhook.secret_key",
  },
  {
    name: "a host's settings with a 7-day cooldown",
    attempt: Layer.build(BothyConfig.layerWith(hostSettings(Duration.days(7)))).pipe(Effect.scoped),
    tag: "InvalidConfig",
    field: "consumer.cooldown",
  },
  {
    name: "a host's policy with an allow-list entry that does not parse",
    attempt: Layer.build(
      WebhookConfig.WebhookConfig.layerWith({
        secretKey: TestWebhooks.secretKey(),
        policy: { allowHttpLoopback: false, allowCidrs: ["10.0.0.0/8", "10.0.0.0/x"], allowHosts: [] },
      }),
    ).pipe(Effect.scoped),
    tag: "InvalidConfig",
    field: "webhook.allow_cidrs",
  },
]

const rows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ events: number; head: string; jobs: number; subscriptions: number; spaces: number; keys: number }>`
    SELECT (SELECT count(*) FROM event_log)::int AS events, (SELECT value FROM event_seq)::text AS head,
           (SELECT count(*) FROM jobs)::int AS jobs, (SELECT count(*) FROM webhook_subscriptions)::int AS subscriptions,
           (SELECT count(*) FROM webhook_subscription_spaces)::int AS spaces,
           (SELECT count(*) FROM webhook_sealing_key)::int AS keys`,
).pipe(Effect.map(([r]) => r!))

layer(Live, { excludeTestServices: true })("BadInputCatalogue", (it) => {
  it.effect(
    "BadInputCatalogue: every bad event, subscription, job insert and setting is its typed error naming the field, and writes nothing",
    () =>
      Effect.gen(function* () {
        const cases = [...eventCases, ...subscriptionCases, ...jobCases, ...configCases]
        assert.isAtLeast(cases.length, 60)
        writeFileSync(openKeyFile, openKey)
        chmodSync(openKeyFile, 0o644)
        const before = yield* rows
        for (const c of cases) {
          const error = yield* c.attempt.pipe(Effect.flip)
          const label = `${c.name}: ${error instanceof Error ? error.message : String(error)}`
          assert.strictEqual((error as { _tag?: string })._tag, c.tag, label)
          assert.strictEqual(fieldOf(error), c.field, label)
          if (c.reason !== undefined) assert.strictEqual(reasonOf(error), c.reason, label)
          const message = (error as Error).message
          assert.notInclude(message, "\n", `${c.name}: one line`)
          assert.isAtMost(message.length, 1000, `${c.name}: short`)
          assert.deepStrictEqual(yield* rows, before, `${c.name}: nothing written`)
        }
        assert.strictEqual(readFileSync(openKeyFile, "utf8"), openKey, "the refused key file is left as it was")
        rmSync(keyFolder, { recursive: true, force: true })
      }),
    120_000,
  )

  it.effect("the documented limits themselves are accepted: depth, scope, event types, unique key", () =>
    Effect.gen(function* () {
      const before = yield* rows
      const appended = yield* withPayload(nested(maxPayloadDepth))
      const { firstSeq } = yield* Effect.flatMap(EventLog, (log) => log.sequenced(appended))
      const [stored] = yield* Effect.flatMap(EventLog, (log) => log.read(firstSeq - 1n, 1))
      assert.deepStrictEqual(stored!.payload, nested(maxPayloadDepth))
      const scope = many(maxScope, (i) => `limit-space-${i}`)
      const eventTypes = many(maxEventTypes, (i) => `limit.type-${i}`)
      const created = yield* create({ scope, eventTypes })
      const sub = yield* Effect.flatMap(WebhookSubscriptions, (w) => w.get(created.id))
      assert.strictEqual(sub.scope.length, maxScope)
      assert.deepStrictEqual(sub.eventTypes, eventTypes)
      const jobs = yield* insert([
        { ...goodJob, args: nested(maxPayloadDepth), uniqueKey: "u".repeat(maxUniqueKeyLength) },
      ])
      assert.strictEqual(jobs.inserted, 1)
      const after = yield* rows
      assert.deepStrictEqual(
        [after.events, after.subscriptions, after.spaces, after.jobs],
        [before.events + 1, before.subscriptions + 1, before.spaces + maxScope, before.jobs + 1],
      )
    }),
  )

  it.effect("defaults pass the bounds and the cross-key rules", () =>
    Effect.gen(function* () {
      const settings = yield* load.pipe(env({}))
      assert.strictEqual(Duration.format(settings.consumer.cooldown), defaults["consumer.cooldown"])
    }),
  )
})

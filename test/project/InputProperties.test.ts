/**
 * Properties of the input validators, checked with fast-check: text PostgreSQL cannot hold is
 * refused wherever it appears, well-formed text within the limits is accepted and comes back from
 * the database unchanged, durations parse to what they say, and an IPv4-mapped address is judged
 * as the IPv4 address it is.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Exit, Option, Result, type Schema } from "effect"
import { SqlClient } from "effect/sql"
import fc from "fast-check"
import { type JobInsert, Jobs } from "../../src/jobs/Jobs.ts"
import { maxPayloadDepth, type NewEvent, validate } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { checkAddress } from "../../src/outbound/AddressCheck.ts"
import * as IpRange from "../../src/outbound/IpRange.ts"
import { durationBounds, parseDurationOrZero, parseDurationWithin } from "../../src/platform/BothyConfig.ts"
import { type NewSubscription, WebhookSubscriptions } from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const Live = TestWebhooks.layer()

// --- arbitraries ---

/** Well-formed text (any code point but NUL), 1 to `max` code points. */
const wellFormed = (max: number) =>
  fc.string({ unit: "binary", minLength: 1, maxLength: max }).filter((s) => !s.includes("\u0000"))

const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((unit) => String.fromCharCode(unit))

/**
 * Text holding a NUL or an unpaired surrogate somewhere. The parts around it are well-formed, so
 * they never pair up with a surrogate put between them.
 */
const unstorableText = fc
  .tuple(
    fc.string({ unit: "binary", maxLength: 30 }),
    fc.oneof(fc.constant("\u0000"), loneSurrogate),
    fc.string({ unit: "binary", maxLength: 30 }),
  )
  .map(([before, bad, after]) => `${before}${bad}${after}`)

const byte = fc.integer({ min: 0, max: 255 })
// First bytes that land in blocked ranges as often as in public ones.
const firstByte = fc.oneof(fc.constantFrom(0, 10, 100, 127, 169, 172, 192, 198, 203, 224, 240, 255), byte)
const ipv4 = fc.tuple(firstByte, byte, byte, byte)

const hexPair = (a: number, b: number) => ((a << 8) | b).toString(16)
/** The IPv4-mapped spellings of one IPv4 address. */
const mappedSpellings = ([a, b, c, d]: ReadonlyArray<number>) => [
  `::ffff:${a}.${b}.${c}.${d}`,
  `::ffff:${hexPair(a!, b!)}:${hexPair(c!, d!)}`,
  `0:0:0:0:0:FFFF:${hexPair(a!, b!)}:${hexPair(c!, d!)}`,
]

const v4Range = fc.tuple(ipv4, fc.integer({ min: 0, max: 32 }))

// --- helpers ---

const refusal = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return { tag: "accepted", field: undefined }
  const error = exit.cause.reasons.find((r) => r._tag === "Fail")?.error as { _tag: string; field?: string }
  return { tag: error?._tag, field: error?.field }
}

const keyed = (root: string, key: string) => `${root}[${JSON.stringify(key)}]`

const counts = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ events: number; jobs: number; subscriptions: number }>`
    SELECT (SELECT count(*) FROM event_log)::int AS events, (SELECT count(*) FROM jobs)::int AS jobs,
           (SELECT count(*) FROM webhook_subscriptions)::int AS subscriptions`,
).pipe(Effect.map(([row]) => row!))

const event = (fields: Record<string, unknown>) => ({
  space: "prop-space",
  type: "prop.event",
  actor: "prop-actor",
  payload: {},
  ...fields,
})

/** `depth` containers nested in each other, arrays or objects as `shapes` says. */
const nestedPayload = (depth: number, shapes: ReadonlyArray<boolean>): Schema.Json => {
  let value: Schema.Json = shapes[0] ? [] : {}
  for (let i = 1; i < depth; i++) value = shapes[i % shapes.length] ? [value] : { k: value }
  return value
}

layer(Live, { excludeTestServices: true })("InputProperties", (it) => {
  it.effect(
    "UnstorableTextRefusedEverywhere: any string with a NUL or a lone surrogate is refused in every field",
    () =>
      Effect.gen(function* () {
        const context = yield* Effect.context<EventLog | Jobs | WebhookSubscriptions>()
        const attempt = (effect: Effect.Effect<unknown, unknown, EventLog | Jobs | WebhookSubscriptions>) =>
          Effect.runPromiseExit(Effect.provideContext(effect, context)).then(refusal)
        const append = (e: unknown) => attempt(Effect.flatMap(EventLog, (log) => log.append([e as NewEvent])))
        const insert = (j: unknown) => attempt(Effect.flatMap(Jobs, (jobs) => jobs.insert([j as JobInsert])))
        const create = (fields: Record<string, unknown>) =>
          attempt(
            Effect.flatMap(WebhookSubscriptions, (w) =>
              w.create({
                owner: "prop-owner",
                url: "https://8.8.8.8/hook",
                eventTypes: [],
                scope: ["prop-space"],
                ...fields,
              } as NewSubscription),
            ),
          )
        const before = yield* counts
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(unstorableText, async (bad) => {
              const expectations: ReadonlyArray<
                readonly [Promise<{ tag: string | undefined; field: unknown }>, string, string]
              > = [
                [append(event({ space: bad })), "InvalidEvent", "space"],
                [append(event({ actor: bad })), "InvalidEvent", "actor"],
                [append(event({ type: bad })), "InvalidEvent", "type"],
                [append(event({ payload: { list: ["ok", bad] } })), "InvalidEvent", "payload.list[1]"],
                [append(event({ payload: { [bad]: 1 } })), "InvalidEvent", keyed("payload", bad)],
                [create({ owner: bad }), "InvalidSubscription", "owner"],
                [create({ scope: ["ok", bad] }), "InvalidSubscription", "scope[1]"],
                [create({ eventTypes: [bad] }), "InvalidSubscription", "eventTypes[0]"],
                [insert({ kind: bad, args: {} }), "InvalidJob", "kind"],
                [insert({ kind: "prop.kind", queue: bad, args: {} }), "InvalidJob", "queue"],
                [insert({ kind: "prop.kind", uniqueKey: bad, args: {} }), "InvalidJob", "uniqueKey"],
                [insert({ kind: "prop.kind", args: { to: [{ name: bad }] } }), "InvalidJob", "args.to[0].name"],
                [insert({ kind: "prop.kind", args: { [bad]: true } }), "InvalidJob", keyed("args", bad)],
              ]
              for (const [result, tag, field] of expectations) {
                assert.deepStrictEqual(await result, { tag, field }, JSON.stringify(bad))
              }
            }),
            { numRuns: 150 },
          ),
        )
        assert.deepStrictEqual(yield* counts, before, "nothing written")
      }),
  )

  it.effect(
    "WellFormedTextRoundTrips: any well-formed non-empty text within the limits is stored and read back unchanged",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const context = yield* Effect.context<EventLog | Jobs | WebhookSubscriptions | SqlClient.SqlClient>()
        const run = <A>(
          effect: Effect.Effect<A, unknown, EventLog | Jobs | WebhookSubscriptions | SqlClient.SqlClient>,
        ) => Effect.runPromise(Effect.provideContext(effect, context))
        let n = 0
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(wellFormed(100), wellFormed(64), async (a, b) => {
              n++
              // An event: every text field and the payload's strings and keys.
              const payload = { text: a, [b]: [a, b], nested: { [a]: b } }
              const appended = await run(
                Effect.flatMap(EventLog, (log) =>
                  log.append([{ space: a, type: "prop.round-trip", actor: b, payload }]),
                ),
              )
              const { firstSeq } = await run(Effect.flatMap(EventLog, (log) => log.sequenced(appended)))
              const [stored] = await run(Effect.flatMap(EventLog, (log) => log.read(firstSeq - 1n, 1)))
              assert.deepStrictEqual([stored!.space, stored!.actor, stored!.payload], [a, b, payload])

              // A job: kind, unique key and args.
              const uniqueKey = `${n}:${a}`
              const args = { text: a, [b]: { list: [b, a] } }
              await run(Effect.flatMap(Jobs, (jobs) => jobs.insert([{ kind: b, args, uniqueKey }])))
              const [job] = await run(sql<{ kind: string; args: unknown }>`
              DELETE FROM jobs WHERE unique_key = ${uniqueKey} RETURNING kind, args`)
              assert.deepStrictEqual([job?.kind, job?.args], [b, args])

              // A subscription: owner and scope.
              const created = await run(
                Effect.flatMap(WebhookSubscriptions, (w) =>
                  w.create({ owner: a, url: "https://8.8.8.8/hook", eventTypes: [], scope: [a, b] }),
                ),
              )
              const sub = await run(Effect.flatMap(WebhookSubscriptions, (w) => w.get(created.id)))
              assert.strictEqual(sub.owner, a)
              assert.deepStrictEqual([...sub.scope].sort(), [...new Set([a, b])].sort())
              await run(Effect.flatMap(WebhookSubscriptions, (w) => w.remove(created.id)))
            }),
            { numRuns: 40 },
          ),
        )
      }),
  )

  it("PayloadDepthBound: a payload of any depth is refused with PayloadTooDeep exactly when it nests deeper than the limit", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 400 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 5 }),
        (depth, shapes) => {
          const result = validate(event({ payload: nestedPayload(depth, shapes) }), 0)
          if (depth <= maxPayloadDepth) assert.isTrue(Result.isSuccess(result), `depth ${depth}`)
          else assert.strictEqual(Result.isFailure(result) ? result.failure.reason : "accepted", "PayloadTooDeep")
        },
      ),
      { numRuns: 300 },
    )
  })

  it("DurationParsing: a number and any spelling of a unit is that many units; bounds hold exactly; nothing throws", () => {
    const unitSpellings: ReadonlyArray<readonly [string, number]> = [
      ...["ms", "milli", "millis", "millisecond", "milliseconds"].map((u) => [u, 1] as const),
      ...["s", "sec", "secs", "second", "seconds"].map((u) => [u, 1000] as const),
      ...["m", "min", "mins", "minute", "minutes"].map((u) => [u, 60_000] as const),
      ...["h", "hr", "hrs", "hour", "hours"].map((u) => [u, 3_600_000] as const),
      ...["d", "day", "days"].map((u) => [u, 86_400_000] as const),
      ...["w", "week", "weeks"].map((u) => [u, 604_800_000] as const),
    ]
    const spelled = fc.record({
      whole: fc.integer({ min: 0, max: 1_000_000 }),
      fraction: fc.option(fc.integer({ min: 0, max: 999 }), { nil: undefined }),
      unit: fc.constantFrom(...unitSpellings),
      gap: fc.constantFrom("", " ", "  "),
      upper: fc.boolean(),
      pad: fc.constantFrom("", " ", "\t"),
    })
    fc.assert(
      fc.property(spelled, ({ whole, fraction, unit: [unit, factor], gap, upper, pad }) => {
        const number = fraction === undefined ? `${whole}` : `${whole}.${fraction}`
        const text = `${pad}${number}${gap}${upper ? unit.toUpperCase() : unit}${pad}`
        const parsed = parseDurationOrZero(text)
        assert.isTrue(Result.isSuccess(parsed), text)
        const millis = Duration.toMillis(Result.getOrThrow(parsed))
        // Exact to the nanosecond, where Duration keeps what a decimal fraction gives.
        assert.approximately(millis, Number(number) * factor, 1e-6, text)
        for (const bounds of Object.values(durationBounds)) {
          const within = millis >= Duration.toMillis(bounds.min) && millis <= Duration.toMillis(bounds.max)
          assert.strictEqual(Result.isSuccess(parseDurationWithin(bounds)(text)), within, text)
        }
      }),
      { numRuns: 500 },
    )
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), (text) => {
        const parsed = parseDurationOrZero(text)
        assert.isTrue(Result.isSuccess(parsed) || Result.isFailure(parsed))
      }),
      { numRuns: 500 },
    )
  })

  it("IPv4MappedCanonicalised: every mapped spelling of an address is judged as the IPv4 address, under any allow-list", () => {
    const policy = fc.record({
      allowHttpLoopback: fc.boolean(),
      ranges: fc.array(v4Range, { maxLength: 4 }),
      mappedForm: fc.boolean(),
      anyIpv6: fc.boolean(),
    })
    fc.assert(
      fc.property(ipv4, policy, (address, { allowHttpLoopback, ranges, mappedForm, anyIpv6 }) => {
        const dotted = address.join(".")
        const asV4 = ranges.map(([r, prefix]) => `${r.join(".")}/${prefix}`)
        const asMapped = ranges.map(([r, prefix]) => `::ffff:${r.join(".")}/${96 + prefix}`)
        const allowCidrs = [...(mappedForm ? asMapped : asV4), ...(anyIpv6 ? ["::/0"] : [])]
        const verdict = (text: string, cidrs: ReadonlyArray<string>) =>
          Option.isSome(checkAddress(text, { allowHttpLoopback, allowCidrs: cidrs }))
        const expected = verdict(dotted, asV4)
        assert.strictEqual(verdict(dotted, allowCidrs), expected, `${dotted} under ${allowCidrs}`)
        for (const spelling of mappedSpellings(address)) {
          assert.strictEqual(verdict(spelling, allowCidrs), expected, `${spelling} under ${allowCidrs}`)
          const canonical = IpRange.canonical(Option.getOrThrow(IpRange.parseAddress(spelling)))
          assert.deepStrictEqual(canonical, Option.getOrThrow(IpRange.parseAddress(dotted)))
        }
      }),
      { numRuns: 1000 },
    )
  })
})

import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Option, Queue, Tracer } from "effect"
import { SqlClient } from "effect/sql"
import * as JobWorker from "../../src/jobs/JobWorker.ts"
import * as TraceParent from "../../src/platform/TraceParent.ts"
import * as WebhookDrainer from "../../src/webhooks/drain/WebhookDrainer.ts"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

/** An in-memory span exporter: every span the program starts, as Effect's own tracer makes it. */
const recorder = () => {
  const spans: Array<Tracer.NativeSpan> = []
  const tracer = Tracer.make({
    span: (options) => {
      const span = new Tracer.NativeSpan(options)
      spans.push(span)
      return span
    },
  })
  return { spans, tracer }
}

const Live = TestWebhooks.layer({ traceparent: true })

layer(Live, { excludeTestServices: true })("traces", (it) => {
  it.effect(
    "TraceFollowsEventToDelivery: each event's trace runs from the producer's transaction through the round and the job to its delivery request, whose traceparent header names it",
    () => {
      const { spans, tracer } = recorder()
      return Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* TestWebhooks.subscribe("trace-owner", receiver.url("/traced"), ["trace-space"])
        // Two producers, two transactions, two traces; one round and one drain job serve both.
        const traces: Array<string> = []
        for (const n of [1, 2]) {
          const span = yield* sql
            .withTransaction(TestWebhooks.append("trace-space", { n }).pipe(Effect.andThen(Effect.currentSpan)))
            .pipe(Effect.withSpan(`producer.transaction.${n}`))
          traces.push(span.traceId)
        }
        yield* TestWebhooks.round()
        const kind = yield* WebhookDrainer.make
        yield* Layer.build(JobWorker.layer({ kinds: [kind], queues: { webhooks: { concurrency: 2 } } }))
        const requests = [yield* Queue.take(receiver.received), yield* Queue.take(receiver.received)]

        const inTrace = (traceId: string) => new Set(spans.filter((s) => s.traceId === traceId).map((s) => s.name))
        for (const [i, traceId] of traces.entries()) {
          const names = inTrace(traceId)
          for (const name of [
            `producer.transaction.${i + 1}`,
            "EventLog.append",
            "WebhookDrainer.attempt",
            "OutboundSender.send",
          ]) {
            assert.isTrue(names.has(name), `trace ${i + 1} holds ${name} (it has ${[...names].join(", ")})`)
          }
          const request = requests.find((r) => JSON.parse(r.body).data.n === i + 1)!
          const header = TraceParent.parse(String(request.headers.traceparent))
          assert.isTrue(Option.isSome(header), `the request of event ${i + 1} carries a traceparent`)
          assert.strictEqual(Option.getOrThrow(header).traceId, traceId)
          const attempt = spans.find((s) => s.traceId === traceId && s.name === "WebhookDrainer.attempt")!
          assert.strictEqual(Option.getOrThrow(header).spanId, attempt.spanId, "the header names the attempt's span")
        }
        // The job runs in the trace of the event that created it (its row carries that trace_parent) ...
        const job = spans.find((s) => s.name === "Job.run")!
        assert.include(traces, job.traceId)
        // ... and the round, one span for both events, links to each producer's append.
        const round = spans.find((s) => s.name === "Consumer.statementRound" && s.links.length > 0)!
        assert.isDefined(round, "a round span links to the events it read")
        const appends = spans.filter((s) => s.name === "EventLog.append")
        assert.sameMembers(
          round.links.map((l) => l.span.spanId),
          appends.map((s) => s.spanId),
        )
        // ... and each attempt, whichever trace it belongs to, links to the job's trace it ran in.
        for (const attempt of spans.filter((s) => s.name === "WebhookDrainer.attempt")) {
          assert.isTrue(
            attempt.links.some((l) => l.span.traceId === job.traceId),
            "the attempt links to the job that ran it",
          )
        }
      }).pipe(Effect.scoped, Effect.withTracer(tracer))
    },
  )
})

layer(TestWebhooks.layer(), { excludeTestServices: true })("traces, header off", (it) => {
  it.effect("TraceparentHeaderOffByDefault: without webhook.traceparent a delivery carries no traceparent header", () =>
    Effect.gen(function* () {
      const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
      yield* TestWebhooks.subscribe("plain-owner", receiver.url("/plain"), ["plain-space"])
      yield* TestWebhooks.append("plain-space", { n: 1 }).pipe(Effect.withSpan("producer.transaction"))
      yield* TestWebhooks.round()
      const kind = yield* WebhookDrainer.make
      yield* Layer.build(JobWorker.layer({ kinds: [kind], queues: { webhooks: { concurrency: 1 } } }))
      const request = yield* Queue.take(receiver.received)
      assert.isUndefined(request.headers.traceparent)
      assert.isDefined(request.headers["webhook-signature"])
    }).pipe(Effect.scoped),
  )
})

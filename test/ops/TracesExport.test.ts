import { assert, layer } from "@effect/vitest"
import { Effect, Queue } from "effect"
import { SqlClient } from "effect/sql"
import * as WebhookReceiver from "../../testkit/WebhookReceiver.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const key = WorkerProcess.rawKey()

const Live = TestWebhooks.layer({ secretKey: key })

interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly name: string
}

interface OtlpExport {
  readonly resourceSpans: ReadonlyArray<{
    readonly resource: { readonly attributes: ReadonlyArray<{ key: string; value: { stringValue?: string } }> }
    readonly scopeSpans: ReadonlyArray<{ readonly spans: ReadonlyArray<OtlpSpan> }>
  }>
}

layer(Live, { excludeTestServices: true })("span export", (it) => {
  it.effect(
    "TracesExportedOverOtlp: with OTEL_EXPORTER_OTLP_ENDPOINT set, a worker exports the spans of an event's delivery, in the producer's trace, to the collector",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const exports = yield* Queue.unbounded<{
          readonly path: string
          readonly body: OtlpExport
          readonly auth: string
        }>()
        const collector = yield* LoopbackServer.http((request, response, body) => {
          Queue.offerUnsafe(exports, {
            path: request.url ?? "",
            body: JSON.parse(body) as OtlpExport,
            auth: String(request.headers.authorization),
          })
          response.writeHead(200, { "content-type": "application/json" }).end("{}")
        })
        const receiver = yield* WebhookReceiver.start(() => ({ status: 200 }))
        yield* TestWebhooks.subscribe("otlp-owner", receiver.url("/otlp"), ["otlp-space"])
        const token = "tok_otlp_3f9c2a"
        const worker = yield* WorkerProcess.start(key, {
          OTEL_EXPORTER_OTLP_ENDPOINT: collector.origin,
          OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer%20${token}`,
          OTEL_SERVICE_NAME: "bothy-under-test",
          OTEL_BSP_SCHEDULE_DELAY: "100",
        })
        const producer = yield* sql
          .withTransaction(TestWebhooks.append("otlp-space", { n: 1 }).pipe(Effect.andThen(Effect.currentSpan)))
          .pipe(Effect.withSpan("producer.transaction"))
        yield* Queue.take(receiver.received)

        const seen: Array<OtlpSpan> = []
        let first: { readonly path: string; readonly body: OtlpExport; readonly auth: string } | undefined
        const wanted = ["Job.run", "WebhookDrainer.attempt", "OutboundSender.send"]
        // A span is exported when it ends: the drain job's after its linger.
        while (!wanted.every((name) => seen.some((s) => s.traceId === producer.traceId && s.name === name))) {
          const got = yield* Queue.take(exports).pipe(Effect.timeout("60 seconds"))
          first ??= got
          for (const r of got.body.resourceSpans) for (const ss of r.scopeSpans) seen.push(...ss.spans)
        }
        assert.strictEqual(first!.path, "/v1/traces")
        assert.strictEqual(first!.auth, `Bearer ${token}`)
        const service = first!.body.resourceSpans[0]!.resource.attributes.find((a) => a.key === "service.name")
        assert.strictEqual(service?.value.stringValue, "bothy-under-test")
        const inTrace = new Set(seen.filter((s) => s.traceId === producer.traceId).map((s) => s.name))
        for (const name of wanted) {
          assert.isTrue(inTrace.has(name), `the export holds ${name} in the producer's trace`)
        }
        worker.process.child.kill("SIGTERM")
        const finished = yield* worker.process.exited
        assert.strictEqual(finished.code, 0, finished.stderr)
        assert.notInclude(finished.stdout + finished.stderr, token)
      }).pipe(Effect.scoped),
  )
})

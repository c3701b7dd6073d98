/**
 * The cost of telemetry: the webhooks end-to-end run with metrics and tracing off
 * against on, in the same process and the same repeats, alternating which arm goes first so drift
 * on a shared machine hits both alike. The figure is CPU per event of the worker side (this
 * process less the producer thread) plus its PostgreSQL backends (less the producer's), and the
 * target is on / off <= 1.1.
 *
 *   off:  Effect's own tracer, no endpoint (`bothy worker` with no OTLP endpoint, metrics.address off)
 *   on:   Tracing.layer exporting over OTLP/HTTP JSON to `TelemetrySink` (a child process that
 *         parses and drops each export), Observability.layer (database gauges every 15 s and
 *         `/metrics`) scraped by the same child every `scrapeEveryMs`
 *
 * Neither arm runs `DeliveryTrace`'s recorder (it is a tracer itself): the arms differ only in
 * what `bothy worker` turns on.
 */
import { Console, Effect } from "effect"
import { freePort } from "../../testkit/EmbeddedServer.ts"
import * as Throughput from "../harness/Throughput.ts"
import * as TelemetrySink from "./TelemetrySink.ts"
import * as WebhookEndToEnd from "./WebhookEndToEnd.ts"

export const ratioTarget = 1.1

type Run = WebhookEndToEnd.EndToEndResult & { readonly repeat: number; readonly arm: "off" | "on" }

const round3 = (n: number) => Math.round(n * 1000) / 1000

/** What one run costs per event: the worker side and its backends, and each alone. */
const costOf = (r: WebhookEndToEnd.EndToEndResult) => ({
  msPerEvent: r.cpu.bothy?.msPerEvent ?? r.cpu.msPerEvent,
  processMsPerEvent: r.cpu.bothy?.processMsPerEvent ?? Number.NaN,
  serverMsPerEvent: r.cpu.bothy?.serverMsPerEvent ?? Number.NaN,
})

export const measure = (
  config: Omit<WebhookEndToEnd.EndToEndConfig, "telemetry">,
  options: { readonly repeats: number; readonly scrapeEveryMs: number },
) =>
  Effect.gen(function* () {
    const sink = yield* TelemetrySink.start
    const runs: Array<Run> = []
    for (let repeat = 1; repeat <= options.repeats; repeat++) {
      const order = repeat % 2 === 1 ? (["off", "on"] as const) : (["on", "off"] as const)
      for (const arm of order) {
        yield* Console.log(
          `telemetry cost #${repeat} (${arm}): ${config.eventsPerSecond} events/s for ${config.seconds} s`,
        )
        const r = yield* WebhookEndToEnd.measure({
          ...config,
          telemetry:
            arm === "off"
              ? { on: false }
              : { on: true, sink, metricsPort: yield* freePort, scrapeEveryMs: options.scrapeEveryMs },
        })
        runs.push({ repeat, arm, ...r })
        yield* Console.log(
          `telemetry cost #${repeat} (${arm}): ${JSON.stringify({ delivered: `${r.delivered}/${r.events}`, duplicates: r.duplicates, outOfOrder: r.outOfOrder, achievedEventsPerSecond: r.achievedEventsPerSecond, cpu: r.cpu, telemetry: r.telemetry })}`,
        )
      }
    }
    const of = (arm: "off" | "on") => runs.filter((r) => r.arm === arm)
    const median = (arm: "off" | "on", f: (r: Run) => number) => round3(Throughput.median(of(arm).map(f)))
    const medians = (arm: "off" | "on") => ({
      msPerEvent: median(arm, (r) => costOf(r).msPerEvent),
      processMsPerEvent: median(arm, (r) => costOf(r).processMsPerEvent),
      serverMsPerEvent: median(arm, (r) => costOf(r).serverMsPerEvent),
      achievedEventsPerSecond: median(arm, (r) => r.achievedEventsPerSecond),
      latencyP95Ms: median(arm, (r) => r.latencyMs.p95),
      machineBusy: median(arm, (r) => r.cpu.machineBusy),
    })
    const off = medians("off")
    const on = medians("on")
    const ratio = round3(on.msPerEvent / off.msPerEvent)
    const processRatio = round3(on.processMsPerEvent / off.processMsPerEvent)
    // Every arm must have done the whole job, and the on arm must have exported and been scraped.
    const complete = runs.every((r) => r.delivered === r.events && r.duplicates === 0 && r.outOfOrder === 0)
    const exported = of("on").every((r) => (r.telemetry?.sink?.spans ?? 0) > 0 && (r.telemetry?.sink?.scrapes ?? 0) > 0)
    return {
      conditions: {
        arms: {
          off: "Effect's own tracer (spans made, not exported), no /metrics, no database gauges: `bothy worker` with no OTEL_EXPORTER_OTLP_ENDPOINT and metrics.address off",
          on: `Tracing.layer over OTLP/HTTP JSON (Effect's OtlpTracer, export every 5 s, batches of up to 1000) to a child process that parses and drops each export; Observability.layer (database gauges every 15 s, /metrics on loopback) scraped by that child every ${options.scrapeEveryMs / 1000} s; composed as bothy worker composes them`,
        },
        cpu: "per event produced (warm-up included, as for the end-to-end part), while producing: this process less the producer thread (process.threadCpuUsage in the thread) and the PostgreSQL server less the producer's backends (pg_stat_activity application_name bothy-bench-producer; /proc utime+stime of the postmaster, its live children and reaped ones). The in-process webhook receiver is counted in both arms",
        order: "each repeat runs both arms, alternating which goes first",
        repeats: options.repeats,
        workload: "the end-to-end part's, same settings (rate, seconds, warm-up, subscriptions, pools, history)",
        breakdown: "none: DeliveryTrace's recorder is itself a tracer, so neither arm runs it",
      },
      results: {
        median: { off, on, ratio, processRatio },
        complete,
        exported,
        runs,
      },
      targets: [
        {
          name: `telemetry on / off CPU per event (worker process + its PostgreSQL backends) <= ${ratioTarget}x`,
          value: ratio,
          target: ratioTarget,
          met: ratio <= ratioTarget && complete && exported,
        },
      ],
      table: [
        [
          "telemetry cost",
          "worker + its backends per event, on / off",
          "ms",
          `${on.msPerEvent} / ${off.msPerEvent}`,
          "",
          `${ratio}x`,
          `<= ${ratioTarget}x`,
        ],
        [
          "telemetry cost",
          "worker process alone per event, on / off",
          "ms",
          `${on.processMsPerEvent} / ${off.processMsPerEvent}`,
          "",
          `${processRatio}x`,
          "",
        ],
        [
          "telemetry cost",
          "every repeat, on / off (worker + backends)",
          "ms",
          Array.from({ length: options.repeats }, (_, k) => {
            const at = (arm: "off" | "on") => runs.find((r) => r.repeat === k + 1 && r.arm === arm)
            const cost = (r: Run | undefined) => (r === undefined ? "n/a" : costOf(r).msPerEvent.toFixed(3))
            return `${cost(at("on"))}/${cost(at("off"))}`
          }).join(", "),
          "",
          "",
          complete && exported ? "all delivered, exported, scraped" : "INCOMPLETE",
        ],
      ],
    }
  }).pipe(Effect.scoped)

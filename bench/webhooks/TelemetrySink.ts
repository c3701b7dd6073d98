/**
 * Where a benchmarked bothy process sends its telemetry, outside that process so its CPU is not
 * counted as bothy's: a child process that plays the OpenTelemetry collector (accepts OTLP/HTTP
 * JSON trace exports, parses each body, counts its spans and discards them) and Prometheus
 * (scrapes a `/metrics` URL every `scrapeEvery`, as a 15 s scrape interval would, and counts the
 * samples it read).
 *
 *   parent: start() ──fork──> this file; child ──{ tracesUrl }──> parent
 *   parent ──{ scrape: url | null }──> child: scrape that URL from now on (null: stop scraping)
 *   parent ──"stats"──> child ──SinkStats (since the last "stats")──> parent
 *
 * What the counts prove: the "on" arm of a run really exported its spans and was really scraped,
 * so its cost was paid, not skipped.
 */
import { fork } from "node:child_process"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"

export interface SinkStats {
  readonly traceExports: number
  readonly traceBytes: number
  readonly spans: number
  /** Spans by name, most first: what the exporter's work is made of. */
  readonly spansByName: Record<string, number>
  /** Exports whose body was not the OTLP JSON shape (counted, not failed: the figure would lie). */
  readonly malformedExports: number
  readonly scrapes: number
  readonly failedScrapes: number
  readonly scrapeBytes: number
  /** Sample lines (not comments) of the last scrape. */
  readonly lastScrapeSamples: number
}

type ToChild = { readonly scrape: string | null; readonly everyMs: number } | "stats"
type FromChild = { readonly tracesUrl: string } | { readonly stats: SinkStats }

/** Starts the sink for the scope's lifetime. */
export const start = Effect.gen(function* () {
  const child = yield* Effect.acquireRelease(
    Effect.sync(() => fork(fileURLToPath(import.meta.url), [], { stdio: ["ignore", "inherit", "inherit", "ipc"] })),
    (c) => Effect.sync(() => c.exitCode === null && c.signalCode === null && c.kill("SIGKILL")),
  )
  const next = <A>(pick: (m: FromChild) => A | undefined) =>
    Effect.callback<A>((resume) => {
      const onMessage = (m: FromChild) => {
        const a = pick(m)
        if (a === undefined) return
        child.off("message", onMessage)
        resume(Effect.succeed(a))
      }
      child.on("message", onMessage)
    })
  const tracesUrl = yield* next((m) => ("tracesUrl" in m ? m.tracesUrl : undefined)).pipe(
    Effect.timeout("30 seconds"),
    Effect.orDie,
  )
  const send = (m: ToChild) => Effect.sync(() => child.send(m))
  return {
    /** OTLP/HTTP traces endpoint (`.../v1/traces`). */
    tracesUrl,
    /** Scrape `url` every `everyMs` from now on; `null` stops. */
    scrape: (url: string | null, everyMs: number) => send({ scrape: url, everyMs }),
    /** The counts since the previous call. */
    stats: send("stats").pipe(Effect.andThen(next((m) => ("stats" in m ? m.stats : undefined)))),
  }
})

if (import.meta.main) {
  const names = new Map<string, number>()
  const zero = (): { -readonly [K in keyof SinkStats]: SinkStats[K] } => ({
    traceExports: 0,
    traceBytes: 0,
    spans: 0,
    spansByName: {},
    malformedExports: 0,
    scrapes: 0,
    failedScrapes: 0,
    scrapeBytes: 0,
    lastScrapeSamples: 0,
  })
  let stats = zero()
  type OtlpBody = {
    readonly resourceSpans?: ReadonlyArray<{
      readonly scopeSpans?: ReadonlyArray<{ readonly spans?: ReadonlyArray<{ readonly name?: string }> }>
    }>
  }
  const collector = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const body = Buffer.concat(chunks)
      stats.traceExports++
      stats.traceBytes += body.length
      try {
        const parsed = JSON.parse(body.toString("utf8")) as OtlpBody
        for (const r of parsed.resourceSpans ?? []) {
          for (const s of r.scopeSpans ?? []) {
            for (const span of s.spans ?? []) {
              stats.spans++
              names.set(span.name ?? "", (names.get(span.name ?? "") ?? 0) + 1)
            }
          }
        }
      } catch {
        stats.malformedExports++
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  let scraper: ReturnType<typeof setInterval> | undefined
  const scrapeOnce = (url: string) =>
    fetch(url).then(
      async (r) => {
        const text = await r.text()
        if (!r.ok) {
          stats.failedScrapes++
          return
        }
        stats.scrapes++
        stats.scrapeBytes += text.length
        stats.lastScrapeSamples = text.split("\n").filter((l) => l !== "" && !l.startsWith("#")).length
      },
      () => {
        stats.failedScrapes++
      },
    )
  process.on("message", (m: ToChild) => {
    if (m === "stats") {
      const spansByName = Object.fromEntries([...names].sort((a, b) => b[1] - a[1]))
      process.send?.({ stats: { ...stats, spansByName } } satisfies FromChild)
      stats = zero()
      names.clear()
      return
    }
    if (scraper !== undefined) clearInterval(scraper)
    scraper = undefined
    const url = m.scrape
    if (url !== null) scraper = setInterval(() => void scrapeOnce(url), m.everyMs)
  })
  process.on("disconnect", () => process.exit(0))
  collector.listen(0, "127.0.0.1", () => {
    const { port } = collector.address() as AddressInfo
    process.send?.({ tracesUrl: `http://127.0.0.1:${port}/v1/traces` } satisfies FromChild)
  })
}

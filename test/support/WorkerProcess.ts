/**
 * `bothy worker` as a child process on the test's database (no embedded server), with its metrics
 * endpoint on a free loopback port and webhooks to loopback allowed; for the tests that observe a
 * running worker from outside, as an operator does.
 */
import { randomBytes } from "node:crypto"
import { Effect } from "effect"
import * as NodeProcess from "./NodeProcess.ts"
import { TestDatabase } from "./TestDatabase.ts"

/** A sealing key as `BOTHY_WEBHOOK_SECRET_KEY` takes it. */
export const rawKey = () => randomBytes(32).toString("base64")

export interface Worker {
  readonly process: NodeProcess.Running
  /** `http://127.0.0.1:PORT/metrics`, from the worker's start line. */
  readonly metricsUrl: string
  /** One scrape of the endpoint: its status, content type and body. */
  readonly scrape: Effect.Effect<{ readonly status: number; readonly contentType: string; readonly body: string }>
}

/** Starts the worker with `key` (and `env`) and returns once it runs and serves its metrics. */
export const start = (key: string, env: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const { url } = yield* TestDatabase
    const process = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], {
      DATABASE_URL: url,
      BOTHY_WEBHOOK_SECRET_KEY: key,
      BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
      BOTHY_METRICS_ADDRESS: "127.0.0.1:0",
      ...env,
    })
    const served = yield* process.waitFor(/metrics served on /)
    yield* process.waitFor(/worker running/)
    const metricsUrl = /metrics served on (http:\/\/[^\s"]+)/.exec(served)![1]!
    const scrape = Effect.promise(async () => {
      const response = await fetch(metricsUrl)
      return {
        status: response.status,
        contentType: response.headers.get("content-type") ?? "",
        body: await response.text(),
      }
    })
    return { process, metricsUrl, scrape } satisfies Worker
  })

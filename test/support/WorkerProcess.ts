/**
 * `bothy worker` as a child process on the test's database (no embedded server), with its metrics
 * endpoint on a free loopback port and webhooks to loopback allowed; for the tests that observe a
 * running worker from outside, as an operator does.
 */
import { randomBytes } from "node:crypto"
import { Effect } from "effect"
import * as NodeProcess from "./NodeProcess.ts"
import { TestDatabase } from "./TestDatabase.ts"
import * as TestPush from "./TestPush.ts"

/** A sealing key as `BOTHY_WEBHOOK_SECRET_KEY` takes it. */
export const rawKey = () => randomBytes(32).toString("base64")

/**
 * The environment of a worker that sends webhooks (a fresh sealing key, loopback targets allowed)
 * and push messages with `vapid` to any push host (the tests' push service is on loopback).
 */
export const deliveringEnv = (vapid: { readonly publicKey: string; readonly privateKey: string }) => ({
  BOTHY_WEBHOOK_SECRET_KEY: rawKey(),
  BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK: "true",
  BOTHY_PUSH_HOSTS: "*",
  BOTHY_PUSH_VAPID_PUBLIC_KEY: vapid.publicKey,
  BOTHY_PUSH_VAPID_PRIVATE_KEY: vapid.privateKey,
  BOTHY_PUSH_SUBJECT: TestPush.subject,
})

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
    const { url, directUrl } = yield* TestDatabase
    const process = yield* NodeProcess.start(NodeProcess.bothy, ["worker"], {
      DATABASE_URL: url,
      // Through the run's pooler, if any: sessions of their own over the direct URL.
      ...(directUrl === url ? {} : { DATABASE_DIRECT_URL: directUrl }),
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

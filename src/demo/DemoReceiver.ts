/**
 * The demo's webhook receiver on loopback: one path per subscription (`/hooks/<name>`, a name the demo gives it), each request
 * verified with the public `standardwebhooks` package against that subscription's secret, as a
 * receiver's team would verify it. A verified request is answered 204 and counted as a delivery
 * done; one that does not verify is answered 401 and counted as a failure (bothy retries it).
 *
 * It starts with what an earlier start kept (`DemoSetup.kept`): the port, when it is free, so the
 * subscriptions kept in the database still reach it, and their secrets.
 */
import type { IncomingMessage } from "node:http"
import { Effect, Redacted } from "effect"
import { Webhook } from "standardwebhooks"
import type { DemoCounts } from "./DemoCounts.ts"
import * as LoopbackEndpoint from "./LoopbackEndpoint.ts"

export interface DemoReceiver {
  readonly port: number
  /** The URL a subscription posts to. */
  readonly url: (name: string) => string
  /** From now on, requests for `name` are verified with `secret`. */
  readonly accept: (name: string, secret: Redacted.Redacted<string>) => void
  /** The secrets it verifies with, by name. */
  readonly secrets: () => ReadonlyMap<string, Redacted.Redacted<string>>
}

/** What the receiver kept of an earlier start. */
export interface Kept {
  readonly receiverPort: number | undefined
  /** Signing secrets by subscription name. */
  readonly secrets: ReadonlyMap<string, Redacted.Redacted<string>>
}

const prefix = "/hooks/"

const headersOf = (request: IncomingMessage): Record<string, string> =>
  Object.fromEntries(Object.entries(request.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : (v ?? "")]))

/** Starts the receiver for the scope, on the kept port if it is free, else on any. */
export const start = (counts: DemoCounts, kept: Kept) =>
  Effect.gen(function* () {
    const secrets = new Map(kept.secrets)
    const verifiers = new Map([...secrets].map(([name, secret]) => [name, new Webhook(Redacted.value(secret))]))
    const { port, origin } = yield* LoopbackEndpoint.listen(
      ({ request, response, path, body }) => {
        const verifier = path.startsWith(prefix) ? verifiers.get(path.slice(prefix.length)) : undefined
        try {
          if (verifier === undefined) throw new Error("no such subscription")
          verifier.verify(body.toString("utf8"), headersOf(request))
          counts.verified++
          response.writeHead(204).end()
        } catch {
          counts.webhookFailures++
          response.writeHead(401).end()
        }
      },
      kept.receiverPort === undefined ? {} : { port: kept.receiverPort },
    )
    return {
      port,
      url: (id) => `${origin}${prefix}${id}`,
      accept: (name, secret) => {
        secrets.set(name, secret)
        verifiers.set(name, new Webhook(Redacted.value(secret)))
      },
      secrets: () => secrets,
    } satisfies DemoReceiver
  })

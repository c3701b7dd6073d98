/**
 * The webhook endpoint of a chaos run, independent of bothy: the kit's Standard Webhooks receiver
 * (`testkit/WebhookReceiver`) with a path per subscription, verifying every request with the public
 * `standardwebhooks` package and the subscription's secret, and recording each one compactly (its
 * `webhook-id`, the event key in its data, its `sequence`, what was answered and when). A request that fails verification is kept
 * as `verified: false`, answered 400, and fails the verdict.
 *
 * Faults are scripted per path: the next requests get 500, 429 with `Retry-After`, or hang (no
 * answer until the run ends; the sender gives up on its own); or every request gets 410 while the
 * endpoint is `gone`. Everything else gets 200, and so does a request right after a failed one (a
 * scripted failure waits for it), so no subscription fails twice in a row.
 */
import { Effect } from "effect"
import * as WebhookReceiver from "../testkit/WebhookReceiver.ts"

export type Answer = 500 | 429 | "hang"

export interface Arrival {
  readonly path: string
  readonly webhookId: string
  /** The producer's key of the event (`data.key`). */
  readonly key: string
  readonly sequence: number
  readonly epoch: number
  /** What was answered; 0 for a hang. */
  readonly status: number
  readonly verified: boolean
  /** `Date.now()` when the request arrived. */
  readonly at: number
}

interface Envelope {
  readonly epoch: number
  readonly sequence: number
  readonly data: { readonly key?: string }
}

const retryAfterSeconds = "1"
const pathOf = (name: string) => `/hook/${name}`

export const start = Effect.gen(function* () {
  const scripts = new Map<string, Array<Answer>>()
  const arrivals: Array<Arrival> = []
  const gone = new Set<string>()
  // A scripted failure waits for a 2xx after the last one: two in a row would put bothy's retry
  // schedule on its next step (5 minutes, then 30), past any run's drain.
  const failedLast = new Set<string>()
  const receiver = yield* WebhookReceiver.start(
    ({ path, headers, signature, at }) => {
      const envelope = signature?.valid === true ? (signature.payload as Envelope) : undefined
      const answer: Answer | 200 | 400 | 410 =
        envelope === undefined
          ? 400
          : gone.has(path)
            ? 410
            : failedLast.has(path)
              ? 200
              : (scripts.get(path)?.shift() ?? 200)
      if (answer === 200) failedLast.delete(path)
      else failedLast.add(path)
      arrivals.push({
        path,
        webhookId: String(headers["webhook-id"] ?? ""),
        key: envelope?.data.key ?? "",
        sequence: envelope?.sequence ?? -1,
        epoch: envelope?.epoch ?? -1,
        status: answer === "hang" ? 0 : answer,
        verified: envelope !== undefined,
        at,
      })
      if (answer === "hang") return { status: 0, hang: true }
      return { status: answer, headers: answer === 429 ? { "retry-after": retryAfterSeconds } : {} }
    },
    { keep: false, keepAliveTimeout: 30_000 },
  )
  return {
    /** The URL of the subscription named `name`, once its secret is known. */
    url: (name: string) => receiver.url(pathOf(name)),
    pathOf,
    trust: (name: string, secret: string) => receiver.trust(pathOf(name), secret),
    /** The next `count` requests to the subscription `name` get `answer`. */
    script: (name: string, answer: Answer, count: number) => {
      const path = pathOf(name)
      scripts.set(path, [...(scripts.get(path) ?? []), ...Array.from({ length: count }, () => answer)])
    },
    /** Every request to the subscription `name` gets 410 until `back`, as an endpoint that went away. */
    gone: (name: string) => gone.add(pathOf(name)),
    back: (name: string) => gone.delete(pathOf(name)),
    arrivals: arrivals as ReadonlyArray<Arrival>,
  }
})

export type Receiver = Effect.Success<typeof start>

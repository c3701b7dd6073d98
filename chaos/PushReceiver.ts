/**
 * The push service of a chaos run, independent of bothy: one HTTP server on 127.0.0.1 with a path
 * per registration, generated as a browser makes one (a P-256 key pair and an auth secret). Every
 * message must carry a valid VAPID token signed by the run's application server key and decrypt
 * (aes128gcm) with that browser's keys, or it is recorded as a rejection (and fails the verdict);
 * the checks are the push benchmark's service's (`bench/plumbing/BenchPushService.ts`).
 *
 * Each message that passes is recorded compactly (registration, the envelope's `event`, answer, time).
 * Faults are scripted per registration: the next messages get 500, 429 with `Retry-After`, or hang
 * (no answer until the run ends; the sender gives up on its own); a `gone` registration gets 410
 * for good. Everything else gets 201, and so does a message right after a failed one.
 */
import { Effect } from "effect"
import { type Browser, checkClaims, decrypt, makeBrowser, verifyToken } from "../bench/plumbing/BenchPushService.ts"
import * as Endpoint from "./Endpoint.ts"

export type Answer = 500 | 429 | "hang"

export interface Arrival {
  readonly registration: string
  /** The envelope's `event`, `<epoch>.<seq>` (its `id` is the message's key, per registration). */
  readonly id: string
  readonly space: string
  /** What was answered; 0 for a hang. */
  readonly status: number
  readonly at: number
}

export interface Rejection {
  readonly registration: string
  readonly reason: string
  readonly at: number
}

const pathPrefix = "/push/"
const retryAfterSeconds = "1"

export const start = (applicationServerKey: string) =>
  Effect.gen(function* () {
    const browsers = new Map<string, Browser>()
    const scripts = new Map<string, Array<Answer>>()
    const arrivals: Array<Arrival> = []
    const gone = new Set<string>()
    // As the webhook receiver does: a scripted failure waits for a 201 after the last one.
    const failedLast = new Set<string>()
    const rejections: Array<Rejection> = []
    const origin = yield* Endpoint.listen((request, response, body, at, hold) => {
      const path = request.url ?? "/"
      const registration = path.startsWith(pathPrefix) ? path.slice(pathPrefix.length) : ""
      const browser = browsers.get(registration)
      const refuse = (status: number, reason: string) => {
        rejections.push({ registration, reason, at })
        response.writeHead(status).end(reason)
      }
      if (browser === undefined) return refuse(404, "no such subscription")
      const claims = verifyToken(request.headers.authorization, applicationServerKey)
      if (typeof claims === "string") return refuse(401, claims)
      const wrong = checkClaims(claims, origin, Math.floor(at / 1000))
      if (wrong !== undefined) return refuse(401, wrong)
      if (request.headers["content-encoding"] !== "aes128gcm") return refuse(400, "not aes128gcm")
      const plaintext = decrypt(body, browser)
      if (typeof plaintext === "string") return refuse(400, plaintext)
      const envelope = JSON.parse(plaintext.toString("utf8")) as { readonly event: string; readonly space: string }
      const answer = gone.has(registration)
        ? 410
        : failedLast.has(registration)
          ? 201
          : (scripts.get(registration)?.shift() ?? 201)
      if (answer === 201) failedLast.delete(registration)
      else failedLast.add(registration)
      arrivals.push({
        registration,
        id: envelope.event,
        space: envelope.space,
        status: answer === "hang" ? 0 : answer,
        at,
      })
      if (answer === "hang") hold(response)
      else response.writeHead(answer, answer === 429 ? { "retry-after": retryAfterSeconds } : {}).end()
    })
    return {
      /** A browser subscription for the registration `name`, as `PushSubscription.toJSON()` gives it. */
      subscribe: (name: string) => {
        const browser = makeBrowser()
        browsers.set(name, browser)
        return { endpoint: `${origin}${pathPrefix}${name}`, keys: browser.keys }
      },
      /** The next `count` messages to the registration `name` get `answer`. */
      script: (name: string, answer: Answer, count: number) =>
        scripts.set(name, [...(scripts.get(name) ?? []), ...Array.from({ length: count }, () => answer)]),
      /** From now on every message to the registration `name` gets 410, as from a subscription the browser dropped. */
      gone: (name: string) => gone.add(name),
      arrivals: arrivals as ReadonlyArray<Arrival>,
      rejections: rejections as ReadonlyArray<Rejection>,
    }
  })

export type PushReceiver = Effect.Success<ReturnType<typeof start>>

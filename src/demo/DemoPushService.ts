/**
 * The demo's Web Push service on loopback, standing in for a browser vendor's: each registration
 * it hands out is a browser's subscription (a fresh P-256 key pair and auth secret, an endpoint
 * `/push/<id>` here), and each message must pass what a push service and that browser check
 * (`WebPushBrowser.check`: a VAPID token signed by the worker's key, aes128gcm that decrypts with
 * the browser's private key) and carry JSON. A message that does is answered 201 and counted as a
 * push; one that does not is answered 400 (401 for the token, 404 for an unknown endpoint) and
 * counted as a failure.
 *
 * The keys live in this process only: a later start registers new browsers (`DemoSetup`).
 */
import { randomBytes } from "node:crypto"
import { Effect } from "effect"
import type { DemoCounts } from "./DemoCounts.ts"
import * as LoopbackEndpoint from "./LoopbackEndpoint.ts"
import * as WebPushBrowser from "./WebPushBrowser.ts"

/** What `PushSubscription.toJSON()` gives a web app, which registers it with bothy. */
export type BrowserSubscription = WebPushBrowser.SubscriptionJson

export interface DemoPushService {
  readonly origin: string
  /** A new browser subscription to this service. */
  readonly subscribe: () => BrowserSubscription
}

const prefix = "/push/"

const isJson = (text: string) => {
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/** Starts the service for the scope; tokens must be signed by `vapidKey` (the worker's public key). */
export const start = (counts: DemoCounts, vapidKey: string) =>
  Effect.gen(function* () {
    const browsers = new Map<string, WebPushBrowser.Browser>()
    let origin = ""
    const endpoint = yield* LoopbackEndpoint.listen(({ request, response, path, body, at }) => {
      const refuse = (status: number) => {
        counts.pushFailures++
        response.writeHead(status).end()
      }
      const browser = path.startsWith(prefix) ? browsers.get(path.slice(prefix.length)) : undefined
      if (browser === undefined) return refuse(404)
      const checked = WebPushBrowser.check({ headers: request.headers, body }, browser, {
        origin,
        nowSeconds: Math.floor(at / 1000),
        applicationServerKey: vapidKey,
      })
      if (!checked.ok) return refuse(checked.status)
      if (!isJson(checked.value.plaintext)) return refuse(400)
      counts.pushes++
      response.writeHead(201).end()
    })
    origin = endpoint.origin
    return {
      origin,
      subscribe: () => {
        const browser = WebPushBrowser.makeBrowser()
        const id = randomBytes(9).toString("base64url")
        browsers.set(id, browser)
        return { endpoint: `${origin}${prefix}${id}`, keys: browser.keys }
      },
    } satisfies DemoPushService
  })

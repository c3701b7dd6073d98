/**
 * The demo's Web Push service on loopback, standing in for a browser vendor's: each registration
 * it hands out is a browser's subscription (a fresh P-256 key pair and auth secret, an endpoint
 * `/push/<id>` here), and each message must carry a VAPID token (RFC 8292) signed by the
 * worker's key and decrypt (aes128gcm, RFC 8291) with that browser's private key, as the browser
 * would decrypt it. A message that does is answered 201 and counted as a push; one that does not is
 * answered 400 (401 for the token, 404 for an unknown endpoint) and counted as a failure.
 *
 * The keys live in this process only: a later start registers new browsers (`DemoSetup`).
 */
import { createDecipheriv, createECDH, type ECDH, hkdfSync, randomBytes, verify } from "node:crypto"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect } from "effect"
import { verifyingKey } from "../push/PushVapid.ts"
import type { DemoCounts } from "./DemoCounts.ts"

/** What `PushSubscription.toJSON()` gives a web app, which registers it with bothy. */
export interface BrowserSubscription {
  readonly endpoint: string
  readonly keys: { readonly p256dh: string; readonly auth: string }
}

export interface DemoPushService {
  readonly origin: string
  /** A new browser subscription to this service. */
  readonly subscribe: () => BrowserSubscription
}

interface Browser {
  readonly ecdh: ECDH
  readonly auth: Buffer
}

const prefix = "/push/"

/** Whether `authorization` is `vapid t=<JWT>, k=<vapidKey>` with the JWT ES256-signed by that key. */
const vapidValid = (authorization: string | undefined, vapidKey: string) => {
  const params = new Map(
    (/^vapid\s+(.*)$/i.exec(authorization ?? "")?.[1] ?? "").split(",").map((pair) => {
      const at = pair.indexOf("=")
      return [pair.slice(0, at).trim(), pair.slice(at + 1).trim()] as const
    }),
  )
  const [head, body, signature] = (params.get("t") ?? "").split(".")
  if (params.get("k") !== vapidKey || head === undefined || body === undefined || signature === undefined) return false
  const key = verifyingKey(vapidKey)
  if (key === undefined) return false
  return verify(
    "sha256",
    Buffer.from(`${head}.${body}`),
    { key, dsaEncoding: "ieee-p1363" },
    Buffer.from(signature, "base64url"),
  )
}

/**
 * RFC 8291 (with RFC 8188's aes128gcm): the header holds the salt, the record size and the
 * sender's ephemeral public key; one record, padded with a 0x02 delimiter. Throws when it does not
 * decrypt.
 */
const decrypt = (message: Buffer, browser: Browser): string => {
  const salt = message.subarray(0, 16)
  const idLength = message.readUInt8(20)
  const senderKey = message.subarray(21, 21 + idLength)
  const record = message.subarray(21 + idLength)
  const shared = browser.ecdh.computeSecret(senderKey)
  const info = Buffer.concat([Buffer.from("WebPush: info\0"), browser.ecdh.getPublicKey(), senderKey])
  const ikm = Buffer.from(hkdfSync("sha256", shared, browser.auth, info, 32))
  const key = Buffer.from(hkdfSync("sha256", ikm, salt, Buffer.from("Content-Encoding: aes128gcm\0"), 16))
  const nonce = Buffer.from(hkdfSync("sha256", ikm, salt, Buffer.from("Content-Encoding: nonce\0"), 12))
  const decipher = createDecipheriv("aes-128-gcm", key, nonce)
  decipher.setAuthTag(record.subarray(record.length - 16))
  const padded = Buffer.concat([decipher.update(record.subarray(0, record.length - 16)), decipher.final()])
  const end = padded.lastIndexOf(2)
  if (end < 0) throw new Error("no padding delimiter")
  return new TextDecoder("utf-8", { fatal: true }).decode(padded.subarray(0, end))
}

const bytesOf = (request: IncomingMessage) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks)))
    request.on("error", reject)
  })

/** Starts the service for the scope; tokens must be signed by `vapidKey` (the worker's public key). */
export const start = (counts: DemoCounts, vapidKey: string) =>
  Effect.gen(function* () {
    const browsers = new Map<string, Browser>()
    const server = createServer((request, response) => {
      const refuse = (status: number) => {
        counts.pushFailures++
        response.writeHead(status).end()
      }
      void bytesOf(request).then(
        (message) => {
          const browser = browsers.get((request.url ?? "").slice(prefix.length))
          if (browser === undefined || !(request.url ?? "").startsWith(prefix)) return refuse(404)
          if (!vapidValid(request.headers.authorization, vapidKey)) return refuse(401)
          try {
            JSON.parse(decrypt(message, browser))
          } catch {
            return refuse(400)
          }
          counts.pushes++
          response.writeHead(201).end()
        },
        () => refuse(400),
      )
    })
    const port = yield* Effect.acquireRelease(
      Effect.callback<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.callback<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        }),
    )
    const origin = `http://127.0.0.1:${port}`
    return {
      origin,
      subscribe: () => {
        const ecdh = createECDH("prime256v1")
        ecdh.generateKeys()
        const auth = randomBytes(16)
        const id = randomBytes(9).toString("base64url")
        browsers.set(id, { ecdh, auth })
        return {
          endpoint: `${origin}${prefix}${id}`,
          keys: { p256dh: ecdh.getPublicKey().toString("base64url"), auth: auth.toString("base64url") },
        }
      },
    } satisfies DemoPushService
  })

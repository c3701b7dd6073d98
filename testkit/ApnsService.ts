/**
 * An APNs fake: HTTP/2 over TLS on 127.0.0.1 (`TlsEndpoint`, trusted through `TestCertificate`),
 * answering `POST /3/device/<token>` as Apple documents.
 *
 * What it keeps true:
 * - A message counts as delivered only when its provider token passes what APNs checks: an ES256
 *   JWT whose signature verifies with the public half of the key the test made, `kid` that key's
 *   id, `iss` the team id, and `iat` at most an hour old by the `Clock` of the scope that started
 *   it (else `403 InvalidProviderToken` or `403 ExpiredProviderToken`); and `apns-topic`,
 *   `apns-push-type` present, a JSON body with `aps` (else `400`).
 * - A message that passed is answered by its device's script (then `200` with an `apns-id`); a
 *   device marked `unregistered` answers `410 Unregistered` for good.
 * - Every message is in `log` and on a queue a test waits on; every provider token seen is counted.
 */
import { generateKeyPairSync, type KeyObject, randomUUID, verify } from "node:crypto"
import { Clock, Effect, Queue } from "effect"
import * as TlsEndpoint from "./TlsEndpoint.ts"

export type Answer =
  | { readonly status: 200 | 403 | 410 | 413 | 500 | 503; readonly reason?: string }
  | { readonly status: 400; readonly reason: string }
  | { readonly status: 429; readonly reason?: string; readonly retryAfter?: string }

export interface Delivered {
  readonly token: string
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly payload: {
    readonly aps: Record<string, unknown>
    readonly bothy?: Readonly<Record<string, string>>
  } & Record<string, unknown>
  /** What the script answered. */
  readonly status: number
  /** The session (connection) it came on, counted from 1. */
  readonly session: number
}

export interface Refusal {
  readonly token: string
  readonly status: number
  readonly reason: string
}

/** An APNs key as Apple issues one (a `.p8`, PEM PKCS#8 P-256), with its ids. */
export interface ApnsKey {
  readonly p8: string
  readonly keyId: string
  readonly teamId: string
  readonly publicKey: KeyObject
}

export const makeKey = (keyId = "ABC123DEFG", teamId = "TEAM123456"): ApnsKey => {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" })
  return { p8: privateKey.export({ format: "pem", type: "pkcs8" }).toString(), keyId, teamId, publicKey }
}

/** A device token as iOS gives one: 32 random bytes, hex. */
export const deviceToken = () => Buffer.from(randomUUID().replaceAll("-", "").repeat(2), "hex").toString("hex")

const part = (text: string) => JSON.parse(Buffer.from(text, "base64url").toString("utf8")) as Record<string, unknown>

/** Why the `authorization` header is refused (APNs' reason), or `undefined` when it passes. */
export const checkProviderToken = (
  authorization: string | undefined,
  key: { readonly keyId: string; readonly teamId: string; readonly publicKey: KeyObject },
  nowSeconds: number,
): string | undefined => {
  const jwt = /^bearer (.+)$/.exec(authorization ?? "")?.[1]
  if (jwt === undefined) return "MissingProviderToken"
  const [header, claims, signature] = jwt.split(".")
  if (header === undefined || claims === undefined || signature === undefined) return "InvalidProviderToken"
  try {
    const h = part(header)
    const c = part(claims)
    const signed = verify(
      "sha256",
      Buffer.from(`${header}.${claims}`),
      { key: key.publicKey, dsaEncoding: "ieee-p1363" },
      Buffer.from(signature, "base64url"),
    )
    if (!signed || h.alg !== "ES256" || h.kid !== key.keyId || c.iss !== key.teamId) return "InvalidProviderToken"
    if (typeof c.iat !== "number" || c.iat > nowSeconds + 60) return "InvalidProviderToken"
    if (nowSeconds - c.iat > 3600) return "ExpiredProviderToken"
    return undefined
  } catch {
    return "InvalidProviderToken"
  }
}

/** Starts the fake for the length of the scope, accepting tokens signed with `key`. */
export const start = (key: ApnsKey) =>
  Effect.gen(function* () {
    const clock = yield* Clock.Clock
    const delivered = yield* Queue.unbounded<Delivered>()
    const log = { delivered: [] as Array<Delivered>, refused: [] as Array<Refusal>, tokens: new Set<string>() }
    const scripts = new Map<string, Array<Answer>>()
    const unregistered = new Set<string>()
    const sessions = new WeakMap<object, number>()
    let sessionCount = 0

    const answer = (arrival: TlsEndpoint.Arrival, status: number, body?: object, headers: object = {}) => {
      arrival.response.writeHead(status, { "apns-id": randomUUID(), ...headers })
      if (body === undefined) arrival.response.end()
      else arrival.response.end(JSON.stringify(body))
    }

    const endpoint = yield* TlsEndpoint.listen((arrival) => {
      const token = /^\/3\/device\/([0-9a-f]+)$/.exec(arrival.path)?.[1] ?? ""
      const headers = arrival.request.headers as Record<string, string | undefined>
      const refuse = (status: number, reason: string) => {
        log.refused.push({ token, status, reason })
        answer(arrival, status, { reason })
      }
      const session: object = arrival.request.stream?.session ?? arrival.request.socket
      if (!sessions.has(session)) sessions.set(session, ++sessionCount)
      if (token === "") return refuse(404, "BadPath")
      const why = checkProviderToken(headers.authorization, key, Math.floor(clock.currentTimeMillisUnsafe() / 1000))
      if (why !== undefined) return refuse(403, why)
      log.tokens.add(headers.authorization!)
      if (headers["apns-topic"] === undefined) return refuse(400, "MissingTopic")
      if (headers["apns-push-type"] === undefined) return refuse(400, "InvalidPushType")
      let payload: Delivered["payload"]
      try {
        payload = JSON.parse(arrival.body.toString("utf8"))
        if (typeof payload.aps !== "object") return refuse(400, "PayloadEmpty")
      } catch {
        return refuse(400, "PayloadEmpty")
      }
      const next: Answer = unregistered.has(token)
        ? { status: 410, reason: "Unregistered" }
        : (scripts.get(token)?.shift() ?? scripts.get("all")?.shift() ?? { status: 200 })
      const entry = { token, headers, payload, status: next.status, session: sessions.get(session) ?? 0 }
      log.delivered.push(entry)
      Queue.offerUnsafe(delivered, entry)
      if (next.status === 200) return answer(arrival, 200)
      const extra = "retryAfter" in next && next.retryAfter !== undefined ? { "retry-after": next.retryAfter } : {}
      answer(arrival, next.status, { reason: next.reason ?? "InternalServerError" }, extra)
    })

    return {
      origin: endpoint.origin,
      counts: endpoint.counts,
      log,
      /** The next answers to `token` (`all`: any device without a script of its own). */
      script: (token: string, answers: ReadonlyArray<Answer>) => scripts.set(token, [...answers]),
      unregister: (token: string) => unregistered.add(token),
      /** Waits for `n` more messages that passed the checks. */
      take: (n: number) => Queue.takeN(delivered, n),
    }
  })

export type ApnsService = Effect.Success<ReturnType<typeof start>>

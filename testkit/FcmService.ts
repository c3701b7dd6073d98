/**
 * An FCM fake: Google's OAuth token endpoint (`POST /token`, the JWT-bearer grant) and FCM HTTP v1
 * (`POST /v1/projects/<project>/messages:send`) on one HTTP/2 TLS server on 127.0.0.1
 * (`TlsEndpoint`, trusted through `TestCertificate`).
 *
 * What it keeps true:
 * - An access token is issued only for an assertion that passes what Google checks: RS256, its
 *   signature verified with the public half of the service account's key the test made, `iss` the
 *   account's email, `scope` firebase.messaging, `aud` this token endpoint, `exp` after `iat`, and
 *   `iat` not ahead of the `Clock` of the scope that started it; else `400 invalid_grant`.
 * - A message counts as delivered only with an access token this fake issued and that has not
 *   expired (else `401 UNAUTHENTICATED`), for the account's project, with `message.token`;
 *   then its token's script answers (`200` with a message name by default). A token marked
 *   `unregistered` answers `404 UNREGISTERED` for good.
 * - Every message is in `log` and on a queue a test waits on; issued tokens are counted.
 */
import { generateKeyPairSync, type KeyObject, randomBytes, verify } from "node:crypto"
import { Clock, Effect, Queue } from "effect"
import * as TlsEndpoint from "./TlsEndpoint.ts"

export type Answer =
  | { readonly status: 200 | 401 | 403 | 500 | 503; readonly errorCode?: string }
  | { readonly status: 400 | 404; readonly errorCode: string; readonly message?: string }
  | { readonly status: 429; readonly retryAfter?: string }

export interface Delivered {
  readonly token: string
  readonly message: Record<string, unknown>
  readonly status: number
}

/** A service account as Firebase issues one, with the public half of its key. */
export interface ServiceAccount {
  readonly json: string
  readonly projectId: string
  readonly clientEmail: string
  readonly publicKey: KeyObject
}

export const makeServiceAccount = (projectId = "bothy-test"): ServiceAccount => {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 })
  const clientEmail = `bothy@${projectId}.iam.gserviceaccount.com`
  const json = JSON.stringify({
    type: "service_account",
    project_id: projectId,
    private_key_id: randomBytes(20).toString("hex"),
    private_key: privateKey.export({ format: "pem", type: "pkcs8" }).toString(),
    client_email: clientEmail,
    token_uri: "https://oauth2.googleapis.com/token",
  })
  return { json, projectId, clientEmail, publicKey }
}

/** A registration token as the Firebase SDK gives one. */
export const registrationToken = () =>
  `${randomBytes(8).toString("base64url")}:APA91b${randomBytes(100).toString("base64url")}`

/** Google's names, written out here so that the fake checks bothy against them, not against itself. */
const messagingScope = "https://www.googleapis.com/auth/firebase.messaging"
const jwtBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"
export const tokenPath = "/token"

const part = (text: string) => JSON.parse(Buffer.from(text, "base64url").toString("utf8")) as Record<string, unknown>

/** Why an assertion is refused, or `undefined` when it passes. */
const checkAssertion = (assertion: string, account: ServiceAccount, audience: string, nowSeconds: number) => {
  const [header, claims, signature] = assertion.split(".")
  if (header === undefined || claims === undefined || signature === undefined) return "not a JWT"
  try {
    const h = part(header)
    const c = part(claims)
    const input = Buffer.from(`${header}.${claims}`)
    if (h.alg !== "RS256" || !verify("sha256", input, account.publicKey, Buffer.from(signature, "base64url"))) {
      return "bad signature"
    }
    if (c.iss !== account.clientEmail) return "wrong iss"
    if (typeof c.scope !== "string" || !c.scope.split(" ").includes(messagingScope)) return "wrong scope"
    if (c.aud !== audience) return "wrong aud"
    if (typeof c.iat !== "number" || typeof c.exp !== "number" || c.exp <= c.iat || c.exp - c.iat > 3600) {
      return "bad iat/exp"
    }
    if (c.iat > nowSeconds + 60 || c.exp < nowSeconds) return "not valid now"
    return undefined
  } catch {
    return "unreadable"
  }
}

/** Starts the fake for the length of the scope, for `account`; access tokens live `lifetime` seconds. */
export const start = (account: ServiceAccount, options: { readonly lifetime?: number } = {}) =>
  Effect.gen(function* () {
    const clock = yield* Clock.Clock
    const lifetime = options.lifetime ?? 3600
    const delivered = yield* Queue.unbounded<Delivered>()
    const issued = new Map<string, number>()
    const log = { delivered: [] as Array<Delivered>, refused: [] as Array<string>, tokensIssued: 0 }
    const scripts = new Map<string, Array<Answer>>()
    const unregistered = new Set<string>()
    let origin = ""
    const now = () => Math.floor(clock.currentTimeMillisUnsafe() / 1000)

    const reply = (arrival: TlsEndpoint.Arrival, status: number, body: object, headers: object = {}) => {
      arrival.response.writeHead(status, { "content-type": "application/json", ...headers })
      arrival.response.end(JSON.stringify(body))
    }
    const fcmError = (status: number, code: string, message = code) => ({
      error: {
        code: status,
        message,
        status: status === 404 ? "NOT_FOUND" : status === 400 ? "INVALID_ARGUMENT" : code,
        details: [{ "@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", errorCode: code }],
      },
    })

    const grant = (arrival: TlsEndpoint.Arrival) => {
      const form = new URLSearchParams(arrival.body.toString("utf8"))
      const why =
        form.get("grant_type") !== jwtBearer
          ? "wrong grant_type"
          : checkAssertion(form.get("assertion") ?? "", account, `${origin}${tokenPath}`, now())
      if (why !== undefined) {
        log.refused.push(`token: ${why}`)
        return reply(arrival, 400, { error: "invalid_grant", error_description: why })
      }
      const token = `ya29.${randomBytes(24).toString("base64url")}`
      issued.set(token, now() + lifetime)
      log.tokensIssued++
      reply(arrival, 200, { access_token: token, expires_in: lifetime, token_type: "Bearer" })
    }

    const send = (arrival: TlsEndpoint.Arrival) => {
      const bearer = /^Bearer (.+)$/.exec(arrival.request.headers.authorization ?? "")?.[1]
      const until = bearer === undefined ? undefined : issued.get(bearer)
      if (until === undefined || until <= now()) {
        log.refused.push("send: unauthenticated")
        return reply(arrival, 401, fcmError(401, "UNAUTHENTICATED"))
      }
      if (arrival.path !== `/v1/projects/${account.projectId}/messages:send`) {
        log.refused.push(`send: ${arrival.path}`)
        return reply(arrival, 403, fcmError(403, "PERMISSION_DENIED"))
      }
      const message = (JSON.parse(arrival.body.toString("utf8")) as { message?: Record<string, unknown> }).message
      const token = typeof message?.token === "string" ? message.token : ""
      if (token === "") return reply(arrival, 400, fcmError(400, "INVALID_ARGUMENT", "message.token is missing"))
      const next: Answer = unregistered.has(token)
        ? { status: 404, errorCode: "UNREGISTERED" }
        : (scripts.get(token)?.shift() ?? scripts.get("all")?.shift() ?? { status: 200 })
      const entry = { token, message: message!, status: next.status }
      log.delivered.push(entry)
      Queue.offerUnsafe(delivered, entry)
      if (next.status === 200) {
        return reply(arrival, 200, { name: `projects/${account.projectId}/messages/${randomBytes(8).toString("hex")}` })
      }
      if (next.status === 429) {
        return reply(
          arrival,
          429,
          fcmError(429, "QUOTA_EXCEEDED"),
          next.retryAfter === undefined ? {} : { "retry-after": next.retryAfter },
        )
      }
      const code = next.errorCode ?? (next.status >= 500 ? "UNAVAILABLE" : "THIRD_PARTY_AUTH_ERROR")
      reply(arrival, next.status, fcmError(next.status, code, "message" in next ? next.message : code))
    }

    const endpoint = yield* TlsEndpoint.listen((arrival) =>
      arrival.path === tokenPath ? grant(arrival) : send(arrival),
    )
    origin = endpoint.origin

    return {
      origin,
      counts: endpoint.counts,
      log,
      /** The next answers to `token` (`all`: any token without a script of its own). */
      script: (token: string, answers: ReadonlyArray<Answer>) => scripts.set(token, [...answers]),
      unregister: (token: string) => unregistered.add(token),
      /** Waits for `n` more messages sent with a valid access token. */
      take: (n: number) => Queue.takeN(delivered, n),
    }
  })

export type FcmService = Effect.Success<ReturnType<typeof start>>

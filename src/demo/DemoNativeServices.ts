/**
 * The demo's stand-ins for APNs and FCM, on one HTTP/2 server on loopback (cleartext: the demo's
 * worker is pointed at it through `PushSettings`' origins, which the environment never sets). The
 * demo makes an APNs key and an FCM service account for the run, and hands the worker their
 * credentials; the server checks what the providers check with the public halves:
 *
 * - APNs `POST /3/device/<token>`: the ES256 provider token (signature, `kid`, `iss`), once per
 *   distinct token: 200, counted as an APNs push;
 * - `POST /token`: the service account's RS256 assertion, then an access token;
 * - FCM `POST /v1/projects/<project>/messages:send`: an access token it issued and a
 *   registration token: 200, counted as an FCM push.
 *
 * Any device token is taken: the devices of an earlier start (whose jobs a new start may still
 * run before the demo registers its new ones) are the demo's as much as the new ones.
 *
 * Anything else is refused and counted as a push failure. The keys live in this process only.
 */
import { generateKeyPairSync, type KeyObject, randomBytes, verify } from "node:crypto"
import { createServer, type ServerHttp2Session, type ServerHttp2Stream } from "node:http2"
import type { AddressInfo } from "node:net"
import { Effect, Redacted } from "effect"
import type { ApnsCredentials, FcmCredentials } from "../push/NativePushConfig.ts"
import type { DemoCounts } from "./DemoCounts.ts"

export interface DemoNativeServices {
  readonly origin: string
  readonly apns: ApnsCredentials
  readonly fcm: FcmCredentials
  /** A new iOS device's token. */
  readonly device: () => string
  /** A new Android app's registration token. */
  readonly fcmToken: () => string
}

const project = "bothy-demo"
const keyId = "DEMO123456"
const teamId = "DEMOTEAM01"

const claims = (part: string) => JSON.parse(Buffer.from(part, "base64url").toString("utf8")) as Record<string, unknown>

/** Whether `jwt` is signed by `key` (ES256 in JWS form, or RS256) and its claims pass `check`. */
const signed = (jwt: string, key: KeyObject, es256: boolean, check: (c: Record<string, unknown>) => boolean) => {
  const [h, c, s] = jwt.split(".")
  if (h === undefined || c === undefined || s === undefined) return false
  try {
    const input = Buffer.from(`${h}.${c}`)
    const signature = Buffer.from(s, "base64url")
    const ok = es256
      ? verify("sha256", input, { key, dsaEncoding: "ieee-p1363" }, signature)
      : verify("sha256", input, key, signature)
    return ok && check(claims(c))
  } catch {
    return false
  }
}

/** Starts the services for the scope, counting into `counts`. */
export const start = (counts: DemoCounts) =>
  Effect.gen(function* () {
    const apnsKey = generateKeyPairSync("ec", { namedCurve: "prime256v1" })
    const account = generateKeyPairSync("rsa", { modulusLength: 2048 })
    const clientEmail = `demo@${project}.iam.gserviceaccount.com`
    const providerTokens = new Map<string, boolean>()
    const accessTokens = new Set<string>()
    let origin = ""

    const answer = (stream: ServerHttp2Stream, status: number, body: object = {}) => {
      if (status >= 300) counts.pushFailures++
      stream.respond({ ":status": status, "content-type": "application/json" })
      stream.end(JSON.stringify(body))
    }
    const apns = (stream: ServerHttp2Stream, authorization: string) => {
      const jwt = authorization.replace(/^bearer /, "")
      let ok = providerTokens.get(jwt)
      if (ok === undefined) {
        ok = signed(jwt, apnsKey.publicKey, true, (c) => c.iss === teamId)
        providerTokens.set(jwt, ok)
      }
      if (!ok) return answer(stream, 403, { reason: "InvalidProviderToken" })
      counts.apnsPushes++
      answer(stream, 200)
    }
    const grant = (stream: ServerHttp2Stream, body: string) => {
      const assertion = new URLSearchParams(body).get("assertion") ?? ""
      if (!signed(assertion, account.publicKey, false, (c) => c.iss === clientEmail && c.aud === `${origin}/token`)) {
        return answer(stream, 400, { error: "invalid_grant" })
      }
      const token = randomBytes(24).toString("base64url")
      accessTokens.add(token)
      answer(stream, 200, { access_token: token, expires_in: 3600, token_type: "Bearer" })
    }
    const fcm = (stream: ServerHttp2Stream, authorization: string, body: string) => {
      if (!accessTokens.has(authorization.replace(/^Bearer /, ""))) {
        return answer(stream, 401, { error: { status: "UNAUTHENTICATED" } })
      }
      const token = (JSON.parse(body) as { message?: { token?: string } }).message?.token ?? ""
      if (token === "") return answer(stream, 400, { error: { status: "INVALID_ARGUMENT" } })
      counts.fcmPushes++
      answer(stream, 200, { name: `projects/${project}/messages/1` })
    }

    const server = createServer()
    const sessions = new Set<ServerHttp2Session>()
    server.on("session", (session) => {
      sessions.add(session)
      session.on("close", () => sessions.delete(session))
    })
    server.on("stream", (stream, headers) => {
      const chunks: Array<Buffer> = []
      stream.on("data", (chunk: Buffer) => chunks.push(chunk))
      stream.on("end", () => {
        const path = String(headers[":path"])
        const body = Buffer.concat(chunks).toString("utf8")
        const authorization = String(headers.authorization ?? "")
        const device = /^\/3\/device\/([0-9a-f]+)$/.exec(path)?.[1]
        if (device !== undefined) return apns(stream, authorization)
        if (path === "/token") return grant(stream, body)
        if (path === `/v1/projects/${project}/messages:send`) return fcm(stream, authorization, body)
        answer(stream, 404)
      })
    })
    const port = yield* Effect.acquireRelease(
      Effect.callback<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.callback<void>((resume) => {
          for (const session of sessions) session.destroy()
          server.close(() => resume(Effect.void))
        }),
    )
    origin = `http://127.0.0.1:${port}`
    return {
      origin,
      apns: { key: Redacted.make(apnsKey.privateKey), keyId, teamId, origins: { sandbox: origin, production: origin } },
      fcm: {
        projectId: project,
        clientEmail,
        privateKey: Redacted.make(account.privateKey),
        origins: { token: origin, send: origin },
      },
      device: () => randomBytes(32).toString("hex"),
      fcmToken: () => `${randomBytes(8).toString("base64url")}:APA91b${randomBytes(60).toString("base64url")}`,
    } satisfies DemoNativeServices
  })

/**
 * The APNs part of `npm run bench -- push`: pushes over one HTTP/2 connection to an APNs fake on
 * its own thread (`BenchApnsService`), through bothy's native sender core: the default renderer,
 * the provider token, a stream per push on the one session (`NativeHttp2`), at most `inFlight`
 * at once (`push.max_in_flight`'s default). Pushes/s and the sender's CPU per push (this thread's
 * time only; the fake's is apart), with the provider token reused (as `bothy worker` sends) and,
 * in the same run, signed for every request (the baseline that reuse is priced against).
 *
 *   render (aps, headers) ──> provider token (reused, or signEach) ──> POST /3/device/<token>
 *   on the one HTTP/2 session ──> fake thread: verify the token once per distinct token, 200
 *
 * No database and no job: what it measures is the cost a worker adds per APNs push on top of the
 * batch job it already runs for Web Push. Checked after every run: every push was accepted, none
 * refused, over exactly one connection; a run that fails the check has no figure.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { Effect, Redacted } from "effect"
import * as ApnsProviderToken from "../../src/push/ApnsProviderToken.ts"
import * as CompactJwt from "../../src/push/CompactJwt.ts"
import * as NativeHttp2 from "../../src/push/NativeHttp2.ts"
import { defaultRender, type RenderInput } from "../../src/push/NativePushRenderer.ts"
import * as PushMessageKey from "../../src/push/PushMessageKey.ts"
import * as TestCertificate from "../../testkit/TestCertificate.ts"
import { round3 } from "../harness/Figures.ts"
import * as BenchApnsService from "./BenchApnsService.ts"

export interface PushApnsConfig {
  readonly pushes: number
  readonly inFlight: number
}

export interface ApnsRun {
  readonly case: "reused" | "signEach"
  readonly pushes: number
  readonly seconds: number
  readonly pushesPerSecond: number
  /** This thread's CPU per push (render, token, HTTP/2 framing, TLS), ms. */
  readonly senderMsPerPush: number
  /** The fake's thread per push (TLS, its checks), ms: apart from the sender's. */
  readonly serviceMsPerPush: number
  readonly sessions: number
  readonly checked: boolean
  readonly problems: ReadonlyArray<string>
}

const keyId = "BENCH12345"
const teamId = "TEAM123456"
const topic = "com.example.bench"

const inputOf = (k: number): RenderInput => {
  const key = PushMessageKey.make(1, String(k + 1), 42n)
  return {
    key,
    topic: PushMessageKey.topic(key),
    type: "card.created",
    space: "bench",
    epoch: 1,
    seq: 42n,
    occurredAt: new Date(),
    summary: "one event, every device",
    ttlSeconds: 86_400,
    expiresAt: Math.floor(Date.now() / 1000) + 86_400,
  }
}

const cpuMicros = () => {
  const used = process.threadCpuUsage()
  return used.user + used.system
}

/** One run of `config.pushes` pushes, the provider token reused or signed for each request. */
export const measure = (config: PushApnsConfig, signEach: boolean) =>
  Effect.gen(function* () {
    const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" })
    const service = yield* BenchApnsService.start({
      publicKey: publicKey.export({ format: "pem", type: "spki" }).toString(),
      keyId,
      teamId,
    })
    const http = yield* NativeHttp2.make({ ca: [TestCertificate.cert] })
    const provider = ApnsProviderToken.make({ key: Redacted.make(privateKey), keyId, teamId })
    const authorization = signEach
      ? Effect.sync(
          () =>
            `bearer ${CompactJwt.sign("ES256", privateKey, { kid: keyId }, { iss: teamId, iat: Math.floor(Date.now() / 1000) })}`,
        )
      : provider.authorization
    const devices = Array.from({ length: config.pushes }, () => randomBytes(32).toString("hex"))
    let failed = 0
    const send = (token: string, k: number) =>
      Effect.gen(function* () {
        const message = defaultRender(inputOf(k), "apns")
        if (message._tag !== "apns") return yield* Effect.die("the renderer made no APNs message")
        const headers = {
          ...message.headers,
          "apns-topic": topic,
          authorization: yield* authorization,
          "content-type": "application/json",
        }
        const answer = yield* http.request(service.origin, {
          method: "POST",
          path: `/3/device/${token}`,
          headers,
          body: JSON.stringify(message.payload),
        })
        if (answer.status !== 200) failed++
      }).pipe(Effect.catchTag("NativeTransportError", () => Effect.sync(() => void failed++)))

    // The connection and the first token before the clock starts: a worker keeps both.
    yield* send(randomBytes(32).toString("hex"), -1)
    const before = yield* service.counts
    const cpu0 = cpuMicros()
    const t0 = performance.now()
    yield* Effect.forEach(devices, send, { concurrency: config.inFlight, discard: true })
    const seconds = (performance.now() - t0) / 1000
    const sender = cpuMicros() - cpu0
    const after = yield* service.counts
    const accepted = after.accepted - before.accepted
    const problems = [
      accepted === config.pushes ? undefined : `${accepted} of ${config.pushes} accepted`,
      after.refused === 0 ? undefined : `${after.refused} refused`,
      failed === 0 ? undefined : `${failed} failed`,
      after.sessions === 1 ? undefined : `${after.sessions} connections, not 1`,
    ].filter((p) => p !== undefined)
    return {
      case: signEach ? "signEach" : "reused",
      pushes: config.pushes,
      seconds: round3(seconds),
      pushesPerSecond: Math.round(config.pushes / seconds),
      senderMsPerPush: round3(sender / 1000 / config.pushes),
      serviceMsPerPush: round3((after.cpuMicros - before.cpuMicros) / 1000 / config.pushes),
      sessions: after.sessions,
      checked: problems.length === 0,
      problems,
    } satisfies ApnsRun
  }).pipe(Effect.scoped)

const median = (values: ReadonlyArray<number>) => {
  if (values.length === 0) return undefined
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor((sorted.length - 1) / 2)]!
}

/** The figures of the runs that passed their check, by case. */
const figures = (runs: ReadonlyArray<ApnsRun>, which: ApnsRun["case"]) => {
  const passed = runs.filter((r) => r.case === which && r.checked)
  return {
    pushesPerSecond: median(passed.map((r) => r.pushesPerSecond)),
    senderMsPerPush: median(passed.map((r) => r.senderMsPerPush)),
    serviceMsPerPush: median(passed.map((r) => r.serviceMsPerPush)),
    passedRuns: passed.length,
  }
}

const fixed = (n: number | undefined, digits: number) => (n === undefined ? "n/a" : n.toFixed(digits))
const ratio = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined || b === 0 ? "n/a" : `${(a / b).toFixed(2)}x`

/** The APNs part's conditions, results and table rows, for the push report. */
export const report = (config: PushApnsConfig, runs: ReadonlyArray<ApnsRun>) => {
  const reused = figures(runs, "reused")
  const signEach = figures(runs, "signEach")
  const row = (
    measure: string,
    what: string,
    unit: string,
    a: number | undefined,
    b: number | undefined,
    digits: number,
  ) => [measure, what, unit, fixed(a, digits), fixed(b, digits), ratio(a, b), "baseline: signEach"]
  return {
    conditions: {
      pushes: config.pushes,
      inFlight: config.inFlight,
      path: "the native sender core (default renderer, ES256 provider token, NativeHttp2) to an APNs fake on its own thread over one HTTP/2 TLS connection; no database, no job",
      fake: "verifies each distinct provider token once (ES256 with the key's public half, kid, iss, iat), answers 200",
    },
    results: { reused, signEach, runs },
    rows: [
      row(
        "apns",
        `${config.pushes} pushes over one HTTP/2 connection, reused token`,
        "pushes/s",
        reused.pushesPerSecond,
        signEach.pushesPerSecond,
        0,
      ),
      row(
        "apns cpu",
        "sender (this thread) per push, reused token",
        "ms",
        reused.senderMsPerPush,
        signEach.senderMsPerPush,
        3,
      ),
      row(
        "apns cpu",
        "the fake's thread per push (apart), reused token",
        "ms",
        reused.serviceMsPerPush,
        signEach.serviceMsPerPush,
        3,
      ),
    ],
  }
}

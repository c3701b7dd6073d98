import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { connections, type SendLimits, send, utf8Prefix } from "../../src/outbound/OutboundSender.ts"
import { type ResolvedAddress, type TargetPolicy, validateUrl } from "../../src/outbound/OutboundTarget.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"

const dnsError = (code: string, host: string) =>
  Object.assign(new Error(`getaddrinfo ${code} ${host}`), { code, hostname: host })

// Every test below dials 127.0.0.1 only; a name nobody expected to resolve fails like DNS would.
const noDns = async (host: string): Promise<ReadonlyArray<ResolvedAddress>> => {
  throw dnsError("ENOTFOUND", host)
}

/** Loopback allowed: the policy tests and local development run under. */
const local: TargetPolicy = { allowHttpLoopback: true, allowCidrs: [], allowHosts: [], resolve: noDns }
/** The production policy: loopback refused. */
const strict: TargetPolicy = { ...local, allowHttpLoopback: false }

const post = (url: string, body = `{"event_seq":42}`) => ({
  url,
  headers: { "content-type": "application/json", "x-bothy-signature": "sig" },
  body,
})

/** A promise the server side settles, for the test to wait on instead of sleeping. */
const signal = () => Promise.withResolvers<void>()
const awaitSignal = (s: ReturnType<typeof signal>) =>
  Effect.promise(() => s.promise).pipe(Effect.timeout("10 seconds"), Effect.orDie)

describe("OutboundSender", () => {
  it.live("a 2xx is a result with its status and body, after one POST as given", () =>
    Effect.gen(function* () {
      const server = yield* LoopbackServer.http((_request, response) => {
        response.writeHead(202, { "content-type": "text/plain" })
        response.end("accepted ✓")
      })
      const result = yield* send(post(`${server.origin}/hooks/1?x=y#fragment`), local)
      assert.deepStrictEqual(
        { ...result, durationMs: 0 },
        {
          status: 202,
          errorClass: undefined,
          body: "accepted ✓",
          truncated: false,
          retryAfter: undefined,
          durationMs: 0,
        },
      )
      assert.isAtLeast(result.durationMs, 0)
      assert.isBelow(result.durationMs, 10_000)
      const [received, ...more] = server.received()
      assert.lengthOf(more, 0)
      assert.strictEqual(received?.method, "POST")
      assert.strictEqual(received?.url, "/hooks/1?x=y")
      assert.strictEqual(received?.body, `{"event_seq":42}`)
      assert.strictEqual(received?.headers["x-bothy-signature"], "sig")
      assert.strictEqual(received?.headers["content-type"], "application/json")
    }),
  )

  it.live("4xx and 5xx are results without an error class; Retry-After comes back raw", () =>
    Effect.gen(function* () {
      const responses: Record<string, readonly [number, string | undefined]> = {
        "/busy": [503, "120"],
        "/slow-down": [429, "Wed, 21 Oct 2015 07:28:00 GMT"],
        "/gone": [410, undefined],
      }
      const server = yield* LoopbackServer.http((request, response) => {
        const [status, retryAfter] = responses[request.url ?? ""] ?? [500, undefined]
        response.writeHead(status, retryAfter === undefined ? {} : { "retry-after": retryAfter })
        response.end(`status ${status}`)
      })
      for (const [path, [status, retryAfter]] of Object.entries(responses)) {
        const result = yield* send(post(`${server.origin}${path}`), local)
        assert.strictEqual(result.status, status, path)
        assert.strictEqual(result.errorClass, undefined, path)
        assert.strictEqual(result.retryAfter, retryAfter, path)
        assert.strictEqual(result.body, `status ${status}`, path)
      }
    }),
  )

  it.live("a 1 MB response body is cut at 20,000 bytes", () =>
    Effect.gen(function* () {
      const server = yield* LoopbackServer.http((_request, response) => {
        response.writeHead(200, { "content-type": "text/plain" })
        response.end("x".repeat(1024 * 1024))
      })
      const result = yield* send(post(server.origin), local)
      assert.strictEqual(result.status, 200)
      assert.isTrue(result.truncated)
      assert.strictEqual(result.body, "x".repeat(20_000))
      assert.isAtMost(Buffer.byteLength(result.body), 20_000)
    }),
  )

  it.live("an endless response body is not read past the cap: the connection is dropped", () =>
    Effect.gen(function* () {
      const closed = signal()
      const server = yield* LoopbackServer.http((_request, response) => {
        response.writeHead(200, { "content-type": "text/plain" })
        const chunk = Buffer.alloc(16 * 1024, "y")
        const pump = () => {
          while (!response.destroyed && response.write(chunk)) {}
        }
        response.on("drain", pump)
        response.on("close", () => closed.resolve())
        pump()
      })
      const result = yield* send(post(server.origin), local)
      assert.strictEqual(result.status, 200)
      assert.isTrue(result.truncated)
      assert.strictEqual(result.body.length, 20_000)
      yield* awaitSignal(closed)
    }),
  )

  it.live("truncation never splits a UTF-8 character; a body of exactly the cap is whole", () =>
    Effect.gen(function* () {
      const bodies: Record<string, string> = {
        // 1 + 3n bytes: byte 20,000 falls inside a euro sign.
        "/euros": `a${"€".repeat(10_000)}`,
        "/exact": "z".repeat(20_000),
      }
      const server = yield* LoopbackServer.http((request, response) => {
        response.end(bodies[request.url ?? ""] ?? "")
      })
      const euros = yield* send(post(`${server.origin}/euros`), local)
      assert.isTrue(euros.truncated)
      assert.strictEqual(Buffer.byteLength(euros.body), 19_999)
      assert.strictEqual(euros.body, `a${"€".repeat(6_666)}`)
      const exact = yield* send(post(`${server.origin}/exact`), local)
      assert.isFalse(exact.truncated)
      assert.strictEqual(exact.body, bodies["/exact"])
    }),
  )

  it("utf8Prefix: cuts before a split character and re-measures replacement characters", () => {
    const emoji = Buffer.from("ab😀", "utf8") // 2 + 4 bytes
    for (let max = 2; max < 6; max++) assert.deepStrictEqual(utf8Prefix(emoji, max), { text: "ab", truncated: true })
    assert.deepStrictEqual(utf8Prefix(emoji, 6), { text: "ab😀", truncated: false })
    // Invalid bytes decode to U+FFFD (3 bytes each), so 10 bad bytes would be 30 bytes of text.
    const invalid = utf8Prefix(Buffer.alloc(10, 0xff), 10)
    assert.isTrue(invalid.truncated)
    assert.isAtMost(Buffer.byteLength(invalid.text), 10)
    assert.strictEqual(invalid.text, "\uFFFD".repeat(3))
  })

  it.live("a redirect is a result and is never followed", () =>
    Effect.gen(function* () {
      const second = yield* LoopbackServer.http((_request, response) => response.end("followed"))
      const first = yield* LoopbackServer.http((request, response) => {
        response.writeHead(Number(request.url?.slice(1)), { location: `${second.origin}/internal` })
        response.end("moved")
      })
      for (const status of [301, 302, 303, 307, 308]) {
        const result = yield* send(post(`${first.origin}/${status}`), local)
        assert.strictEqual(result.status, status)
        assert.strictEqual(result.errorClass, "redirect")
        assert.strictEqual(result.body, "moved")
      }
      assert.lengthOf(first.received(), 5)
      assert.strictEqual(second.connections(), 0, "the redirect target never heard from us")
    }),
  )

  it.live("a server that never answers is a timeout at the total limit", () =>
    Effect.gen(function* () {
      const arrived = signal()
      const server = yield* LoopbackServer.http(() => arrived.resolve()) // holds the response forever
      const result = yield* send(post(server.origin), local, { totalTimeout: "300 millis" })
      assert.strictEqual(result.errorClass, "timeout")
      assert.strictEqual(result.status, undefined)
      assert.isAtLeast(result.durationMs, 290)
      assert.isBelow(result.durationMs, 5_000)
      yield* awaitSignal(arrived)
      assert.lengthOf(server.received(), 1, "the request went out; the answer never came")
    }),
  )

  it.live("an interrupted send aborts its request: a kept-alive connection is dropped, not left waiting", () =>
    Effect.gen(function* () {
      const arrived = signal()
      const closed = signal()
      const server = yield* LoopbackServer.http((request) => {
        request.socket.on("close", () => closed.resolve())
        arrived.resolve() // holds the response forever
      })
      const shared = yield* connections(local)
      const sending = yield* Effect.forkChild(send(post(server.origin), local, { totalTimeout: "30 seconds" }, shared))
      yield* awaitSignal(arrived)
      yield* Fiber.interrupt(sending)
      yield* awaitSignal(closed)
    }),
  )

  it.live("a TLS handshake that never completes is a timeout at the connect limit", () =>
    Effect.gen(function* () {
      const server = yield* LoopbackServer.silent()
      const limits: Partial<SendLimits> = { connectTimeout: "200 millis", totalTimeout: "20 seconds" }
      const result = yield* send(post(server.origin), local, limits)
      assert.strictEqual(result.errorClass, "timeout")
      assert.isBelow(result.durationMs, 10_000, "the connect limit fired, not the total one")
      assert.strictEqual(server.connections(), 1)
    }),
  )

  it.live("a DNS answer that never comes is a timeout at the connect limit", () =>
    Effect.gen(function* () {
      const policy: TargetPolicy = { ...strict, resolve: () => new Promise(() => {}) }
      const limits: Partial<SendLimits> = { connectTimeout: "200 millis", totalTimeout: "20 seconds" }
      const result = yield* send(post("https://hanging.test/"), policy, limits)
      assert.strictEqual(result.errorClass, "timeout")
      assert.isBelow(result.durationMs, 10_000)
    }),
  )

  it.live("a refused port is connect; a name that does not resolve is dns", () =>
    Effect.gen(function* () {
      const port = yield* LoopbackServer.closedPort
      const refused = yield* send(post(`http://127.0.0.1:${port}/`), local)
      assert.strictEqual(refused.errorClass, "connect")
      assert.strictEqual(refused.status, undefined)
      for (const code of ["ENOTFOUND", "EAI_AGAIN"]) {
        const policy: TargetPolicy = {
          ...strict,
          resolve: async (host) => {
            throw dnsError(code, host)
          },
        }
        const result = yield* send(post("https://nowhere.test/"), policy)
        assert.strictEqual(result.errorClass, "dns", code)
      }
      const empty = yield* send(post("https://empty.test/"), { ...strict, resolve: async () => [] })
      assert.strictEqual(empty.errorClass, "dns")
    }),
  )

  it.live("an untrusted certificate or a server that does not speak TLS is tls, and no request is sent", () =>
    Effect.gen(function* () {
      const selfSigned = yield* LoopbackServer.httpsSelfSigned((_request, response) => response.end("ok"))
      const untrusted = yield* send(post(selfSigned.origin), local)
      assert.strictEqual(untrusted.errorClass, "tls")
      assert.strictEqual(selfSigned.connections(), 1)
      assert.lengthOf(selfSigned.received(), 0)
      const plain = yield* LoopbackServer.http((_request, response) => response.end("ok"))
      const notTls = yield* send(post(plain.origin.replace("http:", "https:")), local)
      assert.strictEqual(notTls.errorClass, "tls")
      assert.lengthOf(plain.received(), 0)
    }),
  )

  it.live("a blocked literal address or a refused URL is blocked_ip without any connection", () =>
    Effect.gen(function* () {
      const server = yield* LoopbackServer.http((_request, response) => response.end("ok"))
      const port = server.port
      for (const url of [
        `https://127.0.0.1:${port}/`,
        `https://[::ffff:127.0.0.1]:${port}/`,
        `https://2130706433:${port}/`,
        `http://127.0.0.1:${port}/`,
        `ftp://127.0.0.1:${port}/`,
        `https://user:pw@localhost:${port}/`,
      ]) {
        const result = yield* send(post(url), strict)
        assert.strictEqual(result.errorClass, "blocked_ip", url)
        assert.strictEqual(result.status, undefined, url)
      }
      assert.strictEqual(server.connections(), 0)
    }),
  )

  it.live("DNS rebinding: a host public at validation and loopback at delivery is blocked_ip at connect time", () =>
    Effect.gen(function* () {
      const server = yield* LoopbackServer.http((_request, response) => response.end("ok"))
      /** Answers a public address the first time and 127.0.0.1 after that. */
      const rebinding = () => {
        const asked: Array<string> = []
        const resolve = async (host: string): Promise<ReadonlyArray<ResolvedAddress>> => {
          asked.push(host)
          return asked.length === 1 ? [{ address: "93.184.216.34", family: 4 }] : [{ address: "127.0.0.1", family: 4 }]
        }
        return { asked, resolve }
      }
      const url = `https://rebind.test:${server.port}/hook`

      const dns = rebinding()
      const policy: TargetPolicy = { ...strict, resolve: dns.resolve }
      yield* validateUrl(url, policy) // creation time: public, accepted
      const result = yield* send(post(url), policy)
      assert.strictEqual(result.errorClass, "blocked_ip")
      assert.deepStrictEqual(dns.asked, ["rebind.test", "rebind.test"], "delivery resolved again, at connect time")
      assert.strictEqual(server.connections(), 0, "the rebound address was never dialed")

      // Control: the same sequence with loopback let through does dial, so the zero above is real.
      const control = rebinding()
      const allowing: TargetPolicy = { ...strict, allowCidrs: ["127.0.0.0/8"], resolve: control.resolve }
      yield* validateUrl(url, allowing)
      const dialed = yield* send(post(url), allowing)
      assert.strictEqual(dialed.errorClass, "tls", "reached the plain-http server over https")
      assert.strictEqual(server.connections(), 1)
    }),
  )

  it.live("an oversized request body is too_large and nothing is sent", () =>
    Effect.gen(function* () {
      const server = yield* LoopbackServer.http((_request, response) => response.end("ok"))
      const atCap = yield* send(post(server.origin, "x".repeat(64 * 1024)), local)
      assert.strictEqual(atCap.status, 200)
      assert.strictEqual(server.connections(), 1)
      for (const body of ["x".repeat(64 * 1024 + 1), "€".repeat(21_846)]) {
        const result = yield* send(post(server.origin, body), local)
        assert.strictEqual(result.errorClass, "too_large")
        assert.strictEqual(result.status, undefined)
      }
      const small = yield* send(post(server.origin, "0123456789a"), local, { maxRequestBytes: 10 })
      assert.strictEqual(small.errorClass, "too_large")
      assert.strictEqual(server.connections(), 1, "only the request at the cap reached the server")
      assert.lengthOf(server.received(), 1)
    }),
  )

  it.live("a binary body (an encrypted push message) is sent byte for byte, its size limit counted in bytes", () =>
    Effect.gen(function* () {
      const bytes = Uint8Array.from({ length: 256 }, (_, i) => i)
      let arrived: Buffer | undefined
      const server = yield* LoopbackServer.http((_request, response, _body, raw) => {
        arrived = raw
        response.writeHead(201).end()
      })
      const sent = yield* send({ url: server.origin, headers: {}, body: bytes }, local, { maxRequestBytes: 256 })
      assert.strictEqual(sent.status, 201)
      assert.deepStrictEqual(arrived, Buffer.from(bytes))
      const over = yield* send({ url: server.origin, headers: {}, body: bytes }, local, { maxRequestBytes: 255 })
      assert.strictEqual(over.errorClass, "too_large")
      assert.lengthOf(server.received(), 1)
    }),
  )
})

import { connect, type Socket } from "node:net"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { checkAddress } from "../../src/outbound/AddressCheck.ts"
import { safeLookup } from "../../src/outbound/CheckedDialer.ts"
import {
  invalidCidrs,
  invalidHosts,
  type ResolvedAddress,
  type TargetPolicy,
  UnsafeWebhookTarget,
  validateUrl,
} from "../../src/outbound/OutboundTarget.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"

const notFound = (host: string) =>
  Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND", hostname: host })

const v4 = (address: string): ResolvedAddress => ({ address, family: 4 })
const v6 = (address: string): ResolvedAddress => ({ address, family: 6 })

/** Simulated DNS: no test ever asks a real resolver. */
const zone: Record<string, ReadonlyArray<ResolvedAddress>> = {
  "public.example": [v4("93.184.216.34"), v6("2606:2800:220:1::1")],
  "private.example": [v4("10.1.2.3")],
  "mixed.example": [v4("93.184.216.34"), v4("192.168.1.5")],
  "v6private.example": [v6("fd00::5")],
  "metadata.example": [v4("169.254.169.254")],
  localhost: [v4("127.0.0.1"), v6("::1")],
  "loopback.test": [v4("127.0.0.1")],
}

/** Counts how often each host was asked for, to prove allowHosts skips resolution. */
const resolver = () => {
  const asked: Array<string> = []
  const resolve = async (host: string) => {
    asked.push(host)
    const answer = zone[host.replace(/\.$/, "")] // DNS treats a trailing dot as the same name
    if (answer === undefined) throw notFound(host)
    return answer
  }
  return { asked, resolve }
}

const policy = (overrides: Partial<TargetPolicy> = {}): TargetPolicy => ({
  allowHttpLoopback: false,
  allowCidrs: [],
  allowHosts: [],
  resolve: resolver().resolve,
  ...overrides,
})

const refused = (url: string, p: TargetPolicy = policy()) =>
  validateUrl(url, p).pipe(
    Effect.flip,
    Effect.map((error) => {
      assert.instanceOf(error, UnsafeWebhookTarget, url)
      return error
    }),
  )

describe("OutboundTarget", () => {
  it.effect(
    "WebhookRejectsUnsafeTargets: private, loopback, link-local, metadata, IPv6 and tunnelled forms, bad schemes and credentials are refused",
    () =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<readonly [url: string, reason: UnsafeWebhookTarget["reason"], detail: string]> = [
          // The three private ranges, at both ends of 172.16/12.
          ["https://10.0.0.1/hook", "BlockedAddress", "private (10.0.0.0/8)"],
          ["https://172.16.0.1/", "BlockedAddress", "private (172.16.0.0/12)"],
          ["https://172.31.255.254/", "BlockedAddress", "private (172.16.0.0/12)"],
          ["https://192.168.1.1/", "BlockedAddress", "private (192.168.0.0/16)"],
          // Loopback without the flag: literal, a name, and http to it.
          ["https://127.0.0.1/", "BlockedAddress", "loopback (127.0.0.0/8)"],
          ["https://127.9.9.9:8443/", "BlockedAddress", "loopback"],
          ["https://localhost/", "BlockedAddress", "loopback"],
          ["http://127.0.0.1/", "HttpNotAllowed", "use https"],
          // Link-local and the metadata address, which is named.
          ["https://169.254.1.1/", "BlockedAddress", "link-local (169.254.0.0/16)"],
          ["https://169.254.169.254/latest/meta-data/", "BlockedAddress", "cloud metadata"],
          ["https://metadata.example/", "BlockedAddress", "cloud metadata"],
          ["https://[fd00:ec2::254]/", "BlockedAddress", "cloud metadata (AWS)"],
          // IPv6.
          ["https://[::1]/", "BlockedAddress", "loopback (::1/128)"],
          ["https://[fe80::1]/", "BlockedAddress", "link-local (fe80::/10)"],
          ["https://[fc00::1]/", "BlockedAddress", "unique-local (fc00::/7)"],
          ["https://[fd12:3456::1]/", "BlockedAddress", "unique-local"],
          ["https://[::]/", "BlockedAddress", "unspecified"],
          ["https://[ff02::1]/", "BlockedAddress", "multicast"],
          ["https://[2001:db8::1]/", "BlockedAddress", "documentation"],
          ["https://[::a00:1]/", "BlockedAddress", "outside global unicast"],
          // IPv6 forms carrying an IPv4 address are judged by it.
          ["https://[::ffff:127.0.0.1]/", "BlockedAddress", "127.0.0.1 in IPv4-mapped form, which is loopback"],
          [
            "https://[::ffff:a9fe:a9fe]/",
            "BlockedAddress",
            "169.254.169.254 in IPv4-mapped form, which is cloud metadata",
          ],
          ["https://[::ffff:a00:1]/", "BlockedAddress", "10.0.0.1 in IPv4-mapped form, which is private"],
          ["https://[::ffff:0:a00:1]/", "BlockedAddress", "10.0.0.1 in IPv4-translated form"],
          ["https://[64:ff9b::c0a8:101]/", "BlockedAddress", "192.168.1.1 in NAT64 form, which is private"],
          ["https://[2002:a00:1::1]/", "BlockedAddress", "10.0.0.1 in 6to4 form, which is private"],
          // Other non-public IPv4 ranges.
          ["https://100.64.0.1/", "BlockedAddress", "CGNAT"],
          ["https://0.0.0.0/", "BlockedAddress", "unspecified"],
          ["https://224.0.0.1/", "BlockedAddress", "multicast"],
          ["https://192.0.2.10/", "BlockedAddress", "documentation"],
          ["https://198.18.0.1/", "BlockedAddress", "benchmarking"],
          ["https://240.0.0.1/", "BlockedAddress", "reserved"],
          ["https://255.255.255.255/", "BlockedAddress", "broadcast"],
          // Numeric IPv4 spellings that URL parsing turns into dotted quads.
          ["http://2130706433/", "HttpNotAllowed", "use https"],
          ["https://2130706433/", "BlockedAddress", "127.0.0.1 is loopback"],
          ["https://0x7f.1/", "BlockedAddress", "127.0.0.1 is loopback"],
          ["https://0177.0.0.1/", "BlockedAddress", "127.0.0.1 is loopback"],
          ["https://0xa000001/", "BlockedAddress", "10.0.0.1 is private"],
          ["https://0/", "BlockedAddress", "unspecified"],
          // Host names: one private answer, or one private among public ones, is enough.
          [
            "https://private.example/",
            "BlockedAddress",
            "private.example resolves to 10.1.2.3, which is private (10.0.0.0/8)",
          ],
          ["https://mixed.example/", "BlockedAddress", "192.168.1.5, which is private"],
          ["https://v6private.example/", "BlockedAddress", "fd00::5, which is unique-local"],
          ["https://nowhere.example/", "Unresolvable", "ENOTFOUND"],
          // Schemes.
          ["ftp://public.example/", "BadScheme", "ftp:"],
          ["file:///etc/passwd", "BadScheme", "file:"],
          ["javascript:alert(1)", "BadScheme", "javascript:"],
          ["http://public.example/", "HttpNotAllowed", "use https"],
          ["not a url", "BadUrl", "not an absolute URL"],
          // Credentials.
          ["https://user:s3cret@public.example/", "Credentials", "username or password"],
          ["https://token@public.example/", "Credentials", "username or password"],
        ]
        assert.isAtLeast(cases.length, 12)
        for (const [url, reason, detail] of cases) {
          const error = yield* refused(url)
          assert.strictEqual(error.reason, reason, url)
          assert.include(error.detail, detail, url)
          assert.include(error.message, reason, url)
        }
      }),
  )

  it.effect("a refusal never echoes a password, parsable URL or not", () =>
    Effect.gen(function* () {
      for (const url of [
        "https://user:s3cret@public.example/path",
        "ftp://user:s3cret@public.example/",
        "https://user:s3cret@10.0.0.1/",
        "https://user:s3cret@exa mple.com/",
        "user:s3cret@example.com",
        "foo://user:s3cret@host/",
        "https://:s3cret@public.example/",
      ]) {
        const error = yield* refused(url)
        assert.notInclude(error.url, "s3cret", url)
        assert.notInclude(error.message, "s3cret", url)
        assert.notInclude(error.detail, "s3cret", url)
      }
      const error = yield* refused("https://user:s3cret@public.example/path?q=1")
      assert.strictEqual(error.url, "https://public.example/path?q=1")
    }),
  )

  it.effect("a public address passes, as a literal, a name, or an IPv6 form carrying a public IPv4", () =>
    Effect.gen(function* () {
      for (const url of [
        "https://public.example/hooks/1?x=y",
        "https://93.184.216.34/",
        "https://[2606:4700:4700::1111]/",
        "https://[::ffff:5db8:d822]/",
        "https://[64:ff9b::5db8:d822]/",
        "https://172.32.0.1/",
        "https://100.128.0.1/",
        "https://PUBLIC.example./",
      ]) {
        const url2 = yield* validateUrl(url, policy())
        assert.instanceOf(url2, URL, url)
      }
      const url = yield* validateUrl("https://public.example/hooks/1?x=y", policy())
      assert.strictEqual(url.href, "https://public.example/hooks/1?x=y")
    }),
  )

  it.effect("allowCidrs lets a blocked range through, IPv4 (also when mapped into IPv6) and IPv6; nothing else", () =>
    Effect.gen(function* () {
      const p = policy({ allowCidrs: ["10.0.0.0/8", "fd00:1::/32", "not a cidr", "192.168.0.0/99"] })
      for (const url of [
        "https://10.20.30.40/",
        "https://private.example/",
        "https://[::ffff:a00:1]/",
        "https://[fd00:1:ffff::1]/",
      ]) {
        yield* validateUrl(url, p)
      }
      for (const url of ["https://192.168.1.1/", "https://[fd00:2::1]/", "https://127.0.0.1/"]) {
        const error = yield* refused(url, p)
        assert.strictEqual(error.reason, "BlockedAddress", url)
      }
      // A narrower allowance leaves the rest of the range blocked.
      const narrow = policy({ allowCidrs: ["10.1.2.0/24"] })
      yield* validateUrl("https://10.1.2.200/", narrow)
      assert.strictEqual((yield* refused("https://10.1.3.1/", narrow)).reason, "BlockedAddress")
    }),
  )

  it.effect("allowHosts skips the address check without resolving; scheme and credential checks still apply", () =>
    Effect.gen(function* () {
      const dns = resolver()
      const p = policy({ allowHosts: ["Private.Example", "10.9.9.9", "::1"], resolve: dns.resolve })
      yield* validateUrl("https://private.example/", p)
      yield* validateUrl("https://10.9.9.9/", p)
      yield* validateUrl("https://[::1]:8443/", p)
      assert.deepStrictEqual(dns.asked, [])
      assert.strictEqual((yield* refused("http://private.example/", p)).reason, "HttpNotAllowed")
      assert.strictEqual((yield* refused("https://u:p@private.example/", p)).reason, "Credentials")
    }),
  )

  it.effect("allowHttpLoopback allows http and https to loopback hosts only", () =>
    Effect.gen(function* () {
      const p = policy({ allowHttpLoopback: true })
      for (const url of [
        "http://127.0.0.1:8080/",
        "http://2130706433/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://localhost:3000/",
        "https://127.0.0.1/",
      ]) {
        yield* validateUrl(url, p)
      }
      for (const [url, reason] of [
        ["http://public.example/", "HttpNotAllowed"],
        ["http://10.0.0.1/", "HttpNotAllowed"],
        ["https://10.0.0.1/", "BlockedAddress"],
        ["https://169.254.169.254/", "BlockedAddress"],
      ] as const) {
        assert.strictEqual((yield* refused(url, p)).reason, reason, url)
      }
    }),
  )

  it("checkAddress: range edges, spellings, and the loopback flag", () => {
    const strict = { allowHttpLoopback: false, allowCidrs: [] }
    const blocked = (address: string, p = strict) => Option.getOrUndefined(checkAddress(address, p))
    // Just outside each range is public.
    for (const address of [
      "9.255.255.255",
      "11.0.0.0",
      "172.15.255.255",
      "172.32.0.0",
      "192.167.255.255",
      "192.169.0.0",
      "100.63.255.255",
      "100.128.0.0",
      "169.253.255.255",
      "198.17.255.255",
      "198.20.0.0",
      "223.255.255.255",
      "2001:4860:4860::8888",
      "2a00:1450::1",
    ]) {
      assert.isUndefined(blocked(address), address)
    }
    assert.include(blocked("10.255.255.255"), "private")
    assert.include(blocked("100.127.255.255"), "CGNAT")
    assert.include(blocked("100.100.100.200"), "cloud metadata")
    assert.include(blocked("198.19.255.255"), "benchmarking")
    assert.include(blocked("fe80::1%eth0"), "link-local")
    assert.include(blocked("FE80::1"), "link-local")
    assert.include(blocked("::ffff:10.0.0.1"), "private")
    assert.include(blocked("0:0:0:0:0:ffff:0a00:0001"), "private")
    assert.include(blocked("febf:ffff::1"), "link-local")
    assert.include(blocked("fec0::1"), "site-local")
    assert.include(blocked("2001::1"), "Teredo")
    assert.include(blocked("64:ff9b:1::1"), "NAT64 local use")
    assert.include(blocked("example.com"), "not an IP address")
    assert.include(blocked("010.0.0.1"), "not an IP address")
    // Loopback only under the flag, in every spelling; nothing else opens with it.
    const loopbackOk = { allowHttpLoopback: true, allowCidrs: [] }
    for (const address of ["127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"]) {
      assert.include(blocked(address), "loopback", address)
      assert.isUndefined(blocked(address, loopbackOk), address)
    }
    for (const address of ["10.0.0.1", "169.254.169.254", "::", "0.0.0.0", "fe80::1"]) {
      assert.isDefined(blocked(address, loopbackOk), address)
    }
  })

  describe("safeLookup", () => {
    const lookup = (hostname: string, options: { all?: boolean; family?: number }, p: TargetPolicy) =>
      Effect.callback<{ error: unknown; address: unknown; family: unknown }>((resume) => {
        safeLookup(p)(hostname, options, (error, address, family) => resume(Effect.succeed({ error, address, family })))
      })

    it.effect("answers like dns.lookup for allowed addresses, single or all, by family", () =>
      Effect.gen(function* () {
        const p = policy()
        const one = yield* lookup("public.example", {}, p)
        assert.deepStrictEqual(one, { error: null, address: "93.184.216.34", family: 4 })
        const all = yield* lookup("public.example", { all: true }, p)
        assert.deepStrictEqual(all.address, [
          { address: "93.184.216.34", family: 4 },
          { address: "2606:2800:220:1::1", family: 6 },
        ])
        const six = yield* lookup("public.example", { family: 6 }, p)
        assert.deepStrictEqual(six, { error: null, address: "2606:2800:220:1::1", family: 6 })
        const missing = yield* lookup("nowhere.example", {}, p)
        assert.strictEqual((missing.error as NodeJS.ErrnoException).code, "ENOTFOUND")
        const noV6 = yield* lookup("private.example", { family: 6 }, policy({ allowCidrs: ["10.0.0.0/8"] }))
        assert.strictEqual((noV6.error as NodeJS.ErrnoException).code, "ENOTFOUND")
      }),
    )

    it.effect("fails with UnsafeWebhookTarget when any address is blocked, unless the host is allowed", () =>
      Effect.gen(function* () {
        for (const host of ["private.example", "mixed.example", "metadata.example"]) {
          const { error } = yield* lookup(host, { all: true }, policy())
          assert.instanceOf(error, UnsafeWebhookTarget, host)
          assert.strictEqual((error as UnsafeWebhookTarget).reason, "BlockedAddress")
          assert.strictEqual((error as UnsafeWebhookTarget).url, host)
        }
        const allowed = yield* lookup("private.example", {}, policy({ allowHosts: ["private.example"] }))
        assert.deepStrictEqual(allowed, { error: null, address: "10.1.2.3", family: 4 })
      }),
    )

    it.live("net.connect with it never dials a blocked address, and dials an allowed one", () =>
      Effect.gen(function* () {
        const server = yield* LoopbackServer.http((_request, response) => response.end())
        // The error the socket failed with, or undefined once it connected.
        const dial = (p: TargetPolicy) =>
          Effect.callback<unknown>((resume) => {
            const socket: Socket = connect({ host: "loopback.test", port: server.port, lookup: safeLookup(p) })
            socket.once("connect", () => {
              socket.destroy()
              resume(Effect.succeed(undefined))
            })
            socket.once("error", (error) => resume(Effect.succeed(error)))
          })
        const refusal = yield* dial(policy())
        assert.instanceOf(refusal, UnsafeWebhookTarget)
        assert.strictEqual(server.connections(), 0, "nothing reached the server")
        assert.isUndefined(yield* dial(policy({ allowHttpLoopback: true })))
        assert.strictEqual(server.connections(), 1)
      }),
    )
  })

  it.effect(
    "IPv4MappedCanonicalised: ::ffff:a.b.c.d is judged as a.b.c.d by allowCidrs, allowHosts and the block list alike",
    () =>
      Effect.gen(function* () {
        // An IPv6 allowance no longer covers IPv4-mapped addresses: ::/0 let metadata through.
        const anyV6 = policy({ allowCidrs: ["::/0"] })
        for (const url of [
          "https://[::ffff:169.254.169.254]/",
          "https://[::ffff:a00:1]/",
          "https://[::ffff:127.0.0.1]/",
        ]) {
          assert.strictEqual((yield* refused(url, anyV6)).reason, "BlockedAddress", url)
        }
        yield* validateUrl("https://[fd00::1]/", anyV6)
        // An allowance written in mapped form covers the IPv4 address, in both spellings.
        const mappedRange = policy({ allowCidrs: ["::ffff:10.0.0.0/104"] })
        yield* validateUrl("https://10.20.30.40/", mappedRange)
        yield* validateUrl("https://[::ffff:a14:1e28]/", mappedRange)
        assert.strictEqual((yield* refused("https://192.168.0.1/", mappedRange)).reason, "BlockedAddress")
        // allowHosts: one entry covers both spellings of the address.
        for (const [entry, url] of [
          ["10.9.9.9", "https://[::ffff:10.9.9.9]/"],
          ["::ffff:10.9.9.9", "https://10.9.9.9/"],
          ["::ffff:a09:909", "https://[::ffff:10.9.9.9]/"],
        ] as const) {
          yield* validateUrl(url, policy({ allowHosts: [entry] }))
        }
        // Loopback over http under the flag, in the mapped spelling too; nothing else.
        const loopback = policy({ allowHttpLoopback: true })
        yield* validateUrl("http://[::ffff:7f00:1]:8080/", loopback)
        assert.strictEqual((yield* refused("http://[::ffff:a00:1]/", loopback)).reason, "HttpNotAllowed")
        // At connect time, an answer in mapped form is judged the same way.
        assert.isTrue(
          Option.isSome(checkAddress("::ffff:169.254.169.254", { allowHttpLoopback: false, allowCidrs: ["::/0"] })),
        )
        assert.isTrue(
          Option.isNone(checkAddress("::ffff:10.1.1.1", { allowHttpLoopback: false, allowCidrs: ["10.0.0.0/8"] })),
        )
      }),
  )

  it.effect("a refused loopback or http target says how to allow it for local testing", () =>
    Effect.gen(function* () {
      for (const url of [
        "http://127.0.0.1:8080/hook",
        "https://127.0.0.1/hook",
        "https://[::1]/",
        "http://public.example/",
      ]) {
        const error = yield* refused(url)
        assert.include(error.message, "BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK=true", url)
      }
      const error = yield* refused("https://10.0.0.1/")
      assert.notInclude(error.message, "BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK", "only where it would help")
    }),
  )

  it("invalidCidrs and invalidHosts name the entries that could never match", () => {
    assert.deepStrictEqual(
      invalidCidrs(["10.0.0.0/8", "fd00::/8", "1.2.3.4", "10.0.0.0/33", "x", "::/129", " 10.0.0.0/8 "]),
      ["10.0.0.0/33", "x", "::/129"],
    )
    assert.deepStrictEqual(
      invalidHosts([
        "example.com",
        "Example.COM.",
        "bücher.example",
        "10.9.9.9",
        "::1",
        "[::1]",
        "_svc.example",
        "*.example.com",
        "example.com:8443",
        "https://example.com",
        "example.com/path",
        "user@example.com",
        "exa mple.com",
      ]),
      [
        "*.example.com",
        "example.com:8443",
        "https://example.com",
        "example.com/path",
        "user@example.com",
        "exa mple.com",
      ],
    )
  })
})

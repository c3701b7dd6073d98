import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { type HostRefusal, hostRefusal, parseTarget, type TargetPolicy } from "../../src/outbound/OutboundTarget.ts"

// Schemes, hosts (names, loopback and private literals in their spellings, allowed ones) and the
// rest of a URL, so that URLs share a scheme and host with others that differ in everything else.
const schemes = ["https", "http", "ftp"]
const hosts = [
  "push.example",
  "Push.Example.",
  "127.0.0.1",
  "2130706433",
  "localhost",
  "[::1]",
  "10.1.2.3",
  "192.168.1.5",
  "169.254.169.254",
  "93.184.216.34",
  "[fd00::5]",
  "[::ffff:10.0.0.1]",
  "allowed.example",
]
const credentials = ["", "user@", "user:secret@", ":secret@"]
const paths = ["/", "/push/1", "/push/2?x=1", "/a%20b#frag"]

const policies: ReadonlyArray<TargetPolicy> = [
  { allowHttpLoopback: false, allowCidrs: [], allowHosts: [] },
  { allowHttpLoopback: true, allowCidrs: ["10.0.0.0/8"], allowHosts: ["allowed.example", "192.168.1.5"] },
]

describe("OutboundTarget", () => {
  it("parseTarget with the host verdicts kept by scheme and host (as the sender keeps them) decides every URL as it does alone", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...policies),
        fc.array(
          fc.tuple(
            fc.constantFrom(...schemes),
            fc.constantFrom(...credentials),
            fc.constantFrom(...hosts),
            fc.constantFrom(...paths),
          ),
          { minLength: 1, maxLength: 40 },
        ),
        (policy, urls) => {
          const kept = new Map<string, HostRefusal>()
          let computed = 0
          const cached = (url: URL) => {
            const key = `${url.protocol}//${url.hostname}`
            if (!kept.has(key)) {
              computed++
              kept.set(key, hostRefusal(url, policy))
            }
            return kept.get(key)
          }
          for (const [scheme, userinfo, host, path] of urls) {
            const raw = `${scheme}://${userinfo}${host}${path}`
            assert.deepStrictEqual(parseTarget(raw, policy, cached), parseTarget(raw, policy), raw)
          }
          assert.isAtMost(computed, schemes.length * hosts.length)
        },
      ),
      { numRuns: 300 },
    )
  })
})

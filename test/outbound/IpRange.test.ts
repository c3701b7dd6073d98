import { assert, describe, it } from "@effect/vitest"
import { Option } from "effect"
import * as IpRange from "../../src/outbound/IpRange.ts"

const bytes = (text: string) => Array.from(Option.getOrThrow(IpRange.parseAddress(text)).bytes)
const contains = (cidr: string, address: string) =>
  IpRange.inRange(Option.getOrThrow(IpRange.parseAddress(address)), IpRange.rangeOf(cidr))

describe("IpRange", () => {
  it("every spelling of one address has the same bytes", () => {
    const mapped = bytes("::ffff:7f00:1")
    for (const spelling of ["::ffff:127.0.0.1", "[::ffff:7f00:1]", "0:0:0:0:0:ffff:7f00:0001", "::FFFF:7F00:1"]) {
      assert.deepStrictEqual(bytes(spelling), mapped, spelling)
    }
    assert.deepStrictEqual(bytes("fe80::1%eth0"), bytes("fe80::1"))
    assert.deepStrictEqual(bytes("::"), new Array(16).fill(0))
    assert.deepStrictEqual(bytes("1::"), [0, 1, ...new Array(14).fill(0)])
    assert.deepStrictEqual(bytes("10.0.0.1"), [10, 0, 0, 1])
  })

  it("text that is not an address, or a range with a bad prefix, does not parse", () => {
    for (const text of ["", "example.com", "1.2.3", "256.0.0.1", "010.0.0.1", "::g", "1:2:3:4:5:6:7:8:9"]) {
      assert.isTrue(Option.isNone(IpRange.parseAddress(text)), text)
    }
    for (const text of ["10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "x/8"]) {
      assert.isTrue(Option.isNone(IpRange.parseRange(text)), text)
    }
    assert.strictEqual(Option.getOrThrow(IpRange.parseRange("10.1.2.3")).prefix, 32)
    assert.strictEqual(Option.getOrThrow(IpRange.parseRange("::1")).prefix, 128)
  })

  it("ranges match on exactly their prefix bits, also off byte boundaries, and never across families", () => {
    assert.isTrue(contains("100.64.0.0/10", "100.127.255.255"))
    assert.isFalse(contains("100.64.0.0/10", "100.128.0.0"))
    assert.isFalse(contains("100.64.0.0/10", "100.63.255.255"))
    assert.isTrue(contains("fc00::/7", "fdff:ffff::1"))
    assert.isFalse(contains("fc00::/7", "fe00::1"))
    assert.isTrue(contains("fe80::/10", "febf::1"))
    assert.isFalse(contains("fe80::/10", "fec0::1"))
    assert.isTrue(contains("0.0.0.0/0", "203.0.113.9"))
    assert.isTrue(contains("10.1.2.3/8", "10.200.0.0"), "host bits in the range are ignored")
    assert.isFalse(contains("10.0.0.0/8", "::ffff:10.0.0.1"), "IPv4-mapped is IPv6 here")
    assert.isFalse(contains("::/0", "10.0.0.1"))
  })

  it("canonical makes an IPv4-mapped address IPv4, and canonicalRange a range inside ::ffff:0:0/96", () => {
    const canonical = (text: string) => IpRange.canonical(Option.getOrThrow(IpRange.parseAddress(text)))
    assert.deepStrictEqual(canonical("::ffff:10.0.0.1"), { family: 4, bytes: Uint8Array.from([10, 0, 0, 1]) })
    assert.deepStrictEqual(canonical("::ffff:a00:1"), canonical("10.0.0.1"))
    for (const other of ["::1", "::ffff:0:a00:1", "64:ff9b::a00:1", "::a00:1", "10.0.0.1"]) {
      assert.deepStrictEqual(canonical(other), Option.getOrThrow(IpRange.parseAddress(other)), other)
    }
    const range = (text: string) => IpRange.canonicalRange(IpRange.rangeOf(text))
    assert.deepStrictEqual(range("::ffff:10.0.0.0/104"), IpRange.rangeOf("10.0.0.0/8"))
    assert.deepStrictEqual(range("::ffff:0:0/96"), IpRange.rangeOf("0.0.0.0/0"))
    assert.deepStrictEqual(range("::ffff:10.1.2.3/128"), IpRange.rangeOf("10.1.2.3/32"))
    for (const other of ["::/0", "::ffff:0:0/95", "fd00::/8", "10.0.0.0/8"]) {
      assert.deepStrictEqual(range(other), IpRange.rangeOf(other), other)
    }
  })
})

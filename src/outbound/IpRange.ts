/**
 * IP addresses and CIDR ranges, compared exactly on their bytes.
 *
 * An address is its 4 or 16 bytes, so every spelling of one address (`::ffff:7f00:1` and
 * `::ffff:127.0.0.1`, a `[bracketed]` URL host, a `%zone` suffix from DNS) compares equal. An
 * IPv4 range never matches an IPv6 address: a caller that wants an IPv4-mapped address
 * (`::ffff:10.0.0.1`, which a dual-stack socket dials as 10.0.0.1) judged as the IPv4 address it
 * is passes it through `canonical` first, and its ranges through `canonicalRange`.
 *
 * Written by hand rather than with `node:net`'s `BlockList` because the webhook policy needs to
 * know *which* range matched (to say why an address is refused) and to pull the IPv4 address out
 * of IPv6 forms that carry one; `BlockList` answers only yes or no.
 */
import { isIPv4, isIPv6 } from "node:net"
import { Option } from "effect"

export interface Address {
  readonly family: 4 | 6
  readonly bytes: Uint8Array
}

export interface Range {
  readonly family: 4 | 6
  readonly bytes: Uint8Array
  /** Leading bits that must match: 0 to 32 for IPv4, 0 to 128 for IPv6. */
  readonly prefix: number
}

const ipv4Bytes = (text: string): Uint8Array => Uint8Array.from(text.split(".").map(Number))

// Only called on text `isIPv6` accepted, so the shape is known to be valid.
const ipv6Bytes = (text: string): Uint8Array => {
  let hex = text
  const lastColon = hex.lastIndexOf(":")
  const tail = hex.slice(lastColon + 1)
  if (tail.includes(".")) {
    // A dotted IPv4 tail (`::ffff:10.0.0.1`) is the last two 16-bit groups.
    const [a = 0, b = 0, c = 0, d = 0] = ipv4Bytes(tail)
    hex = `${hex.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head = "", rest] = hex.split("::")
  const groupsOf = (part: string) => (part === "" ? [] : part.split(":").map((g) => Number.parseInt(g, 16)))
  const before = groupsOf(head)
  const after = rest === undefined ? [] : groupsOf(rest)
  const groups = [...before, ...new Array<number>(8 - before.length - after.length).fill(0), ...after]
  const bytes = new Uint8Array(16)
  groups.forEach((group, i) => {
    bytes[2 * i] = group >> 8
    bytes[2 * i + 1] = group & 0xff
  })
  return bytes
}

/** Parses `10.0.0.1`, `::1`, `[::1]`, `fe80::1%eth0`, `::ffff:1.2.3.4`; anything else is `None`. */
export const parseAddress = (text: string): Option.Option<Address> => {
  const unbracketed = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text
  const zone = unbracketed.indexOf("%")
  const plain = zone >= 0 ? unbracketed.slice(0, zone) : unbracketed
  if (isIPv4(plain)) return Option.some({ family: 4, bytes: ipv4Bytes(plain) })
  if (isIPv6(plain)) return Option.some({ family: 6, bytes: ipv6Bytes(plain) })
  return Option.none()
}

/** Parses `10.0.0.0/8` or `fd00::/8`; a bare address is a range of one. Host bits may be set. */
export const parseRange = (text: string): Option.Option<Range> => {
  const slash = text.indexOf("/")
  const addressText = slash >= 0 ? text.slice(0, slash) : text
  return Option.flatMap(parseAddress(addressText.trim()), (address) => {
    const max = address.family === 4 ? 32 : 128
    const prefixText = slash >= 0 ? text.slice(slash + 1).trim() : String(max)
    const prefix = /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : -1
    return prefix >= 0 && prefix <= max ? Option.some({ ...address, prefix }) : Option.none()
  })
}

/** Parses a range written in this program's source, where a typo is a bug rather than input. */
export const rangeOf = (text: string): Range => Option.getOrThrow(parseRange(text))

export const inRange = (address: Address, range: Range): boolean => {
  if (address.family !== range.family) return false
  const fullBytes = range.prefix >> 3
  for (let i = 0; i < fullBytes; i++) {
    if (address.bytes[i] !== range.bytes[i]) return false
  }
  const restBits = range.prefix & 7
  if (restBits === 0) return true
  const mask = (0xff << (8 - restBits)) & 0xff
  return ((address.bytes[fullBytes]! ^ range.bytes[fullBytes]!) & mask) === 0
}

/** The IPv4 address in four bytes, e.g. those embedded in an IPv6 address. */
export const ipv4 = (bytes: Uint8Array): Address => ({ family: 4, bytes })

export const formatIpv4 = (address: Address): string => address.bytes.join(".")

// ::ffff:0:0/96: an IPv4 address written as IPv6; the last four bytes are the address.
const mappedPrefix = Uint8Array.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])
const isMapped = (bytes: Uint8Array) => bytes.length === 16 && mappedPrefix.every((b, i) => bytes[i] === b)

/** An IPv4-mapped IPv6 address as the IPv4 address it is; any other address unchanged. */
export const canonical = (address: Address): Address =>
  address.family === 6 && isMapped(address.bytes) ? ipv4(address.bytes.slice(12)) : address

/**
 * A range inside ::ffff:0:0/96 as the IPv4 range it is (`::ffff:10.0.0.0/104` is 10.0.0.0/8);
 * any other range unchanged. A wider IPv6 range (`::/0`) then no longer covers IPv4-mapped
 * addresses, which `canonical` has made IPv4: only IPv4 ranges judge IPv4 addresses.
 */
export const canonicalRange = (range: Range): Range =>
  range.family === 6 && range.prefix >= 96 && isMapped(range.bytes)
    ? { family: 4, bytes: range.bytes.slice(12), prefix: range.prefix - 96 }
    : range

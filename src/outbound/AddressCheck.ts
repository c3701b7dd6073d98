/**
 * Which IP addresses an outbound connection may reach, so that a target cannot be aimed at the
 * inside of our network (SSRF): the one judgement that both the URL checks (`OutboundTarget`) and
 * the checked dialer (`CheckedDialer`) apply to an address.
 *
 * An address is refused when it lies in a non-public range (`ipv4Blocked`, `ipv6Blocked`),
 * unless an `allowCidrs` entry covers it. An IPv4-mapped address (`::ffff:10.0.0.1`) is the IPv4
 * address it carries before anything else looks at it, the allow-list included (so `::/0` does
 * not let `::ffff:169.254.169.254` through). Other IPv6 forms that carry an IPv4 address
 * (IPv4-translated, NAT64, 6to4) are judged by that IPv4 address when no IPv6 allowance covers
 * them. Loopback is refused unless `allowHttpLoopback` (`BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK`) is set,
 * which is meant for tests and local development.
 */
import { Option } from "effect"
import { envName } from "../platform/BothyConfig.ts"
import * as IpRange from "./IpRange.ts"

/** The setting that lets loopback through (`AddressPolicy.allowHttpLoopback`), named in refusals. */
export const allowHttpLoopbackKey = "webhook.allow_http_loopback"
export const loopbackHint = `${envName(allowHttpLoopbackKey)}=true allows loopback targets, and http to them, for local testing`

/** What of a `TargetPolicy` judges an address. */
export interface AddressPolicy {
  /** Lets loopback addresses through. Tests and local development only. */
  readonly allowHttpLoopback: boolean
  /** IPv4 or IPv6 ranges (`10.1.0.0/16`, `fd00:1::/32`, or one address) let through despite a block. */
  readonly allowCidrs: ReadonlyArray<string>
}

interface Blocked {
  readonly range: IpRange.Range
  readonly cidr: string
  readonly name: string
  /** Let through when `allowHttpLoopback` is set. */
  readonly loopback?: true
}

const blocked = (cidr: string, name: string, loopback?: true): Blocked => ({
  range: IpRange.rangeOf(cidr),
  cidr,
  name,
  ...(loopback ? { loopback } : {}),
})

// First match names the reason, so the specific entries come before the ranges holding them.
// Sources: the IANA IPv4 and IPv6 special-purpose address registries, plus cloud metadata services.
const ipv4Blocked: ReadonlyArray<Blocked> = [
  blocked("0.0.0.0/8", "unspecified (this network)"),
  blocked("10.0.0.0/8", "private"),
  blocked("100.100.100.200/32", "cloud metadata (Alibaba)"),
  blocked("100.64.0.0/10", "shared address space (CGNAT)"),
  blocked("127.0.0.0/8", "loopback", true),
  blocked("169.254.169.254/32", "cloud metadata (AWS, GCP, Azure, OpenStack)"),
  blocked("169.254.0.0/16", "link-local"),
  blocked("172.16.0.0/12", "private"),
  blocked("192.0.0.0/24", "IETF protocol assignments"),
  blocked("192.0.2.0/24", "documentation (TEST-NET-1)"),
  blocked("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
  blocked("192.168.0.0/16", "private"),
  blocked("198.18.0.0/15", "benchmarking"),
  blocked("198.51.100.0/24", "documentation (TEST-NET-2)"),
  blocked("203.0.113.0/24", "documentation (TEST-NET-3)"),
  blocked("224.0.0.0/4", "multicast"),
  blocked("255.255.255.255/32", "broadcast"),
  blocked("240.0.0.0/4", "reserved"),
]

const ipv6Blocked: ReadonlyArray<Blocked> = [
  blocked("::/128", "unspecified"),
  blocked("::1/128", "loopback", true),
  blocked("64:ff9b:1::/48", "NAT64 local use"),
  blocked("100::/64", "discard-only"),
  blocked("2001::/32", "Teredo tunnel"),
  blocked("2001:2::/48", "benchmarking"),
  blocked("2001::/23", "IETF protocol assignments"),
  blocked("2001:db8::/32", "documentation"),
  blocked("3fff::/20", "documentation"),
  blocked("fd00:ec2::254/128", "cloud metadata (AWS)"),
  blocked("fc00::/7", "unique-local"),
  blocked("fe80::/10", "link-local"),
  blocked("fec0::/10", "site-local (deprecated)"),
  blocked("ff00::/8", "multicast"),
]

// Everything routable on the public IPv6 internet lies in 2000::/3; the rest is reserved.
const globalUnicast = IpRange.rangeOf("2000::/3")

// IPv6 forms whose traffic ends at an IPv4 address, and where in the 16 bytes it sits. (IPv4-mapped
// is one too, but `IpRange.canonical` has made it IPv4 before any of these is consulted.)
const ipv4Carriers: ReadonlyArray<{ readonly range: IpRange.Range; readonly name: string; readonly at: number }> = [
  { range: IpRange.rangeOf("::ffff:0:0:0/96"), name: "IPv4-translated", at: 12 },
  { range: IpRange.rangeOf("64:ff9b::/96"), name: "NAT64", at: 12 },
  { range: IpRange.rangeOf("2002::/16"), name: "6to4", at: 2 },
]

/** The IPv4 address an IPv6 address carries, if it is one of the forms that route to IPv4. */
export const embeddedIpv4 = (
  address: IpRange.Address,
): Option.Option<{ readonly ipv4: IpRange.Address; readonly form: string }> => {
  if (IpRange.canonical(address) !== address) {
    return Option.some({ ipv4: IpRange.canonical(address), form: "IPv4-mapped" })
  }
  const carrier = ipv4Carriers.find((c) => IpRange.inRange(address, c.range))
  return carrier === undefined
    ? Option.none()
    : Option.some({ ipv4: IpRange.ipv4(address.bytes.slice(carrier.at, carrier.at + 4)), form: carrier.name })
}

const allowedRanges = (policy: Pick<AddressPolicy, "allowCidrs">): ReadonlyArray<IpRange.Range> =>
  policy.allowCidrs.flatMap((cidr) => Option.toArray(Option.map(IpRange.parseRange(cidr), IpRange.canonicalRange)))

const whyBlocked = (
  address: IpRange.Address,
  allowed: ReadonlyArray<IpRange.Range>,
  allowHttpLoopback: boolean,
): Option.Option<string> => {
  const ipv4 = IpRange.canonical(address)
  if (ipv4 !== address) {
    return Option.map(
      whyBlocked(ipv4, allowed, allowHttpLoopback),
      (why) => `${IpRange.formatIpv4(ipv4)} in IPv4-mapped form, which is ${why}`,
    )
  }
  if (allowed.some((range) => IpRange.inRange(address, range))) return Option.none()
  if (address.family === 6) {
    const carried = embeddedIpv4(address)
    if (Option.isSome(carried)) {
      const { ipv4, form } = carried.value
      return Option.map(
        whyBlocked(ipv4, allowed, allowHttpLoopback),
        (why) => `${IpRange.formatIpv4(ipv4)} in ${form} form, which is ${why}`,
      )
    }
  }
  const table = address.family === 4 ? ipv4Blocked : ipv6Blocked
  const hit = table.find((entry) => IpRange.inRange(address, entry.range))
  if (hit !== undefined) {
    if (hit.loopback && allowHttpLoopback) return Option.none()
    return Option.some(`${hit.name} (${hit.cidr})${hit.loopback ? `; ${loopbackHint}` : ""}`)
  }
  if (address.family === 6 && !IpRange.inRange(address, globalUnicast)) {
    return Option.some("reserved (outside global unicast 2000::/3)")
  }
  return Option.none()
}

/**
 * Why an address may not be reached, or `None` when it may. Text that is not an IP address is
 * refused too.
 */
export const checkAddress = (address: string, policy: AddressPolicy): Option.Option<string> =>
  Option.match(IpRange.parseAddress(address), {
    onNone: () => Option.some("not an IP address"),
    onSome: (parsed) => whyBlocked(parsed, allowedRanges(policy), policy.allowHttpLoopback),
  })

/** The first blocked address among those a host resolved to, and why, as "ADDRESS, which is WHY". */
export const firstBlocked = (addresses: ReadonlyArray<{ readonly address: string }>, policy: AddressPolicy) =>
  Option.firstSomeOf(
    addresses.map(({ address }) => Option.map(checkAddress(address, policy), (why) => `${address}, which is ${why}`)),
  )

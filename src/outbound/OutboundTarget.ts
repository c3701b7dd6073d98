/**
 * Which URLs and addresses a webhook may reach, so that a webhook cannot be aimed at the inside
 * of our network (SSRF).
 *
 * Checked twice, because DNS may answer differently between the two:
 * - `validateUrl`, when a webhook is created, for quick feedback: https only, no credentials, and
 *   every address the host resolves to now must be public.
 * - `safeLookup`, when a delivery connects: the resolver used for the socket refuses a blocked
 *   address, so the address actually dialed is the one checked. A host that answered with a
 *   public address at creation and a private one later (DNS rebinding) is refused then.
 *
 * An address is refused when it lies in a non-public range (`ipv4Blocked`, `ipv6Blocked`),
 * unless an `allowCidrs` entry covers it. An IPv4-mapped address (`::ffff:10.0.0.1`) is the IPv4
 * address it carries before anything else looks at it, the allow-list included (so `::/0` does
 * not let `::ffff:169.254.169.254` through, and `allowHosts` "10.0.0.1" covers both spellings).
 * Other IPv6 forms that carry an IPv4 address (IPv4-translated, NAT64, 6to4) are judged by that
 * IPv4 address when no IPv6 allowance covers them. Loopback is refused unless
 * `allowHttpLoopback` (`BOTHY_WEBHOOK_ALLOW_HTTP_LOOPBACK`) is set, which is meant for tests and
 * local development and is also the only case where plain http is accepted.
 */

import type { LookupAddress, LookupOptions } from "node:dns"
import { promises as dns } from "node:dns"
import type { LookupFunction } from "node:net"
import { isIP } from "node:net"
import { Effect, Option, Result, Schema } from "effect"
import { envName } from "../platform/BothyConfig.ts"
import * as IpRange from "./IpRange.ts"

/** The setting that lets loopback through (`TargetPolicy.allowHttpLoopback`), named in refusals. */
export const allowHttpLoopbackKey = "webhook.allow_http_loopback"
const allowHttpLoopbackVariable = envName(allowHttpLoopbackKey)
const loopbackHint = `${allowHttpLoopbackVariable}=true allows loopback targets, and http to them, for local testing`

export interface ResolvedAddress {
  readonly address: string
  readonly family: 4 | 6
}

export interface TargetPolicy {
  /** Lets loopback addresses through, and plain http to a loopback host. Tests and local development only. */
  readonly allowHttpLoopback: boolean
  /** IPv4 or IPv6 ranges (`10.1.0.0/16`, `fd00:1::/32`, or one address) let through despite a block. Entries must parse (`invalidCidrs`). */
  readonly allowCidrs: ReadonlyArray<string>
  /** Host names (or IP literals) whose addresses are not checked at all. Entries must parse (`invalidHosts`). */
  readonly allowHosts: ReadonlyArray<string>
  /** Resolves a host name to every address it has. Defaults to the system resolver (`dns.lookup`). */
  readonly resolve?: (host: string) => Promise<ReadonlyArray<ResolvedAddress>>
}

export class UnsafeWebhookTarget extends Schema.TaggedError<UnsafeWebhookTarget>()("UnsafeWebhookTarget", {
  /** The URL with any username and password removed. At connect time, only the host is known. */
  url: Schema.String,
  reason: Schema.Literals(["BadUrl", "BadScheme", "HttpNotAllowed", "Credentials", "BlockedAddress", "Unresolvable"]),
  detail: Schema.String,
}) {
  override get message() {
    return `webhook target ${this.url} refused (${this.reason}): ${this.detail}`
  }
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

/** The `allowCidrs` entries that do not parse as an address or a range. */
export const invalidCidrs = (cidrs: ReadonlyArray<string>): ReadonlyArray<string> =>
  cidrs.filter((cidr) => Option.isNone(IpRange.parseRange(cidr)))

const allowedRanges = (policy: Pick<TargetPolicy, "allowCidrs">): ReadonlyArray<IpRange.Range> =>
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
export const checkAddress = (
  address: string,
  policy: Pick<TargetPolicy, "allowHttpLoopback" | "allowCidrs">,
): Option.Option<string> =>
  Option.match(IpRange.parseAddress(address), {
    onNone: () => Option.some("not an IP address"),
    onSome: (parsed) => whyBlocked(parsed, allowedRanges(policy), policy.allowHttpLoopback),
  })

const loopbackRanges = [IpRange.rangeOf("127.0.0.0/8"), IpRange.rangeOf("::1/128")]

/** `localhost` or a loopback IP literal; a URL's `hostname` (IPv6 in brackets) is accepted. */
const isLoopbackHost = (hostname: string): boolean =>
  hostname === "localhost" ||
  hostname === "localhost." ||
  Option.exists(IpRange.parseAddress(hostname), (address) =>
    loopbackRanges.some((range) => IpRange.inRange(IpRange.canonical(address), range)),
  )

const unbracket = (host: string) => (host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host)

// Compares hosts the way URL spells them, so `Example.COM.`, `example.com` and `[::1]`/`::1`
// configured in `allowHosts` match the URL's host; an IPv4-mapped literal is its IPv4 address.
const canonicalHost = (host: string): string => {
  const bare = unbracket(host.trim().toLowerCase())
  const address = IpRange.parseAddress(bare)
  if (Option.isSome(address) && IpRange.canonical(address.value).family === 4) {
    return IpRange.formatIpv4(IpRange.canonical(address.value))
  }
  const spelled = URL.parse(`https://${isIP(bare) === 6 ? `[${bare}]` : bare}/`)?.hostname ?? bare
  return unbracket(spelled).replace(/\.$/, "")
}

// What a host name can be once URL has spelled it (IDNs become punycode): no wildcard, port,
// path or credentials, which URL would otherwise cut off or keep without complaint.
const hostName = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$/

/** The `allowHosts` entries that are neither a host name nor an IP address. */
export const invalidHosts = (hosts: ReadonlyArray<string>): ReadonlyArray<string> =>
  hosts.filter((host) => {
    const bare = unbracket(host.trim().toLowerCase())
    if (isIP(bare) !== 0) return false
    const url = URL.parse(`https://${bare}/`)
    return (
      url === null ||
      url.host !== url.hostname ||
      !hostName.test(url.hostname) ||
      url.href !== `https://${url.hostname}/`
    )
  })

const isAllowedHost = (hostname: string, policy: Pick<TargetPolicy, "allowHosts">): boolean => {
  const host = canonicalHost(hostname)
  return policy.allowHosts.some((allowed) => canonicalHost(allowed) === host)
}

/**
 * The URL as it may be shown. With a host, it is re-serialised without username and password.
 * Otherwise (unparsable, or opaque like `user:secret@example.com`, which parses with scheme
 * `user:`) anything shaped like `name:secret@` is cut out, even at the cost of some text.
 */
export const redactUrl = (raw: string): string => {
  const url = URL.parse(raw)
  if (url === null || url.host === "") return raw.replace(/[^\s/?#@]*:[^\s/?#@]*@/g, "")
  url.username = ""
  url.password = ""
  return url.href
}

const refuse = (raw: string, reason: UnsafeWebhookTarget["reason"], detail: string) =>
  new UnsafeWebhookTarget({ url: redactUrl(raw), reason, detail })

/**
 * Everything about a URL that can be decided without DNS: it parses, the scheme is https (or
 * http to a loopback host under `allowHttpLoopback`), it has no credentials, and an IP literal
 * host is an allowed address. WHATWG URL parsing has already turned numeric IPv4 forms
 * (`http://2130706433/`, `0x7f.1`) into dotted quads, so they are checked like any literal.
 *
 * The sender uses this alone before each delivery and leaves host names to `safeLookup`.
 */
export const parseTarget = (raw: string, policy: TargetPolicy): Result.Result<URL, UnsafeWebhookTarget> => {
  const url = URL.parse(raw)
  if (url === null) return Result.fail(refuse(raw, "BadUrl", "not an absolute URL"))
  if (url.protocol === "http:") {
    if (!policy.allowHttpLoopback || !isLoopbackHost(url.hostname)) {
      return Result.fail(refuse(raw, "HttpNotAllowed", `plain http is refused; use https (${loopbackHint})`))
    }
  } else if (url.protocol !== "https:") {
    return Result.fail(refuse(raw, "BadScheme", `scheme ${url.protocol} is refused; use https`))
  }
  if (url.username !== "" || url.password !== "") {
    return Result.fail(
      refuse(raw, "Credentials", "the URL carries a username or password; send secrets in headers instead"),
    )
  }
  if (isAllowedHost(url.hostname, policy)) return Result.succeed(url)
  if (Option.isSome(IpRange.parseAddress(url.hostname))) {
    const why = checkAddress(url.hostname, policy)
    if (Option.isSome(why)) {
      return Result.fail(refuse(raw, "BlockedAddress", `${unbracket(url.hostname)} is ${why.value}`))
    }
  }
  return Result.succeed(url)
}

const systemResolve = async (host: string): Promise<ReadonlyArray<ResolvedAddress>> =>
  (await dns.lookup(host, { all: true, verbatim: true })).map(({ address, family }) => ({
    address,
    family: family === 6 ? 6 : 4,
  }))

const resolverOf = (policy: TargetPolicy) => policy.resolve ?? systemResolve

/** The first blocked address among those a host resolved to, and why, as "ADDRESS, which is WHY". */
const firstBlocked = (addresses: ReadonlyArray<ResolvedAddress>, policy: TargetPolicy) =>
  Option.firstSomeOf(
    addresses.map(({ address }) => Option.map(checkAddress(address, policy), (why) => `${address}, which is ${why}`)),
  )

/**
 * Creation-time check of a webhook URL: `parseTarget`, then the host is resolved and every address
 * it has must be allowed (one private address among public ones is enough to refuse, since the
 * client may dial any of them). Hosts in `allowHosts` are not resolved.
 *
 * Passing here does not make later deliveries safe on its own: DNS can change, which is what
 * `safeLookup` is for.
 */
export const validateUrl = Effect.fn("OutboundTarget.validateUrl")(function* (raw: string, policy: TargetPolicy) {
  const url = yield* Effect.fromResult(parseTarget(raw, policy))
  if (isAllowedHost(url.hostname, policy) || isIP(unbracket(url.hostname)) !== 0) return url
  const addresses = yield* Effect.tryPromise({
    try: () => resolverOf(policy)(url.hostname),
    catch: (error) =>
      refuse(
        raw,
        "Unresolvable",
        `${url.hostname} did not resolve (${error instanceof Error ? error.message : error})`,
      ),
  })
  if (addresses.length === 0) {
    return yield* refuse(raw, "Unresolvable", `${url.hostname} has no addresses`)
  }
  const blockedAddress = firstBlocked(addresses, policy)
  if (Option.isSome(blockedAddress)) {
    return yield* refuse(raw, "BlockedAddress", `${url.hostname} resolves to ${blockedAddress.value}`)
  }
  return url
})

const familyOf = (options: LookupOptions): 0 | 4 | 6 =>
  options.family === 4 || options.family === "IPv4" ? 4 : options.family === 6 || options.family === "IPv6" ? 6 : 0

/**
 * A `lookup` for `net.connect`, `tls.connect` or undici's `connect.lookup` that resolves through
 * `policy.resolve` and fails the connection with `UnsafeWebhookTarget` (reason `BlockedAddress`,
 * `url` set to the host) when any address the host resolved to is blocked, so nothing is dialed.
 * Resolver errors pass through unchanged (`ENOTFOUND` stays `ENOTFOUND`).
 *
 * Node does not call `lookup` for IP literals; `parseTarget` covers those before connecting.
 */
export const safeLookup =
  (policy: TargetPolicy): LookupFunction =>
  (hostname, options, callback) => {
    const family = familyOf(options)
    // Wrapped so that a resolver throwing synchronously still ends in the callback.
    new Promise<ReadonlyArray<ResolvedAddress>>((resolve) => resolve(resolverOf(policy)(hostname))).then(
      (resolved) => {
        const addresses = resolved.filter((a) => family === 0 || a.family === family)
        const first = addresses[0]
        if (first === undefined) {
          // Node's lookup contract: an errno-style error, as dns.lookup gives for a name without addresses.
          const error: NodeJS.ErrnoException = Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), {
            code: "ENOTFOUND",
            hostname,
          })
          return callback(error, [])
        }
        const blockedAddress = isAllowedHost(hostname, policy) ? Option.none() : firstBlocked(addresses, policy)
        if (Option.isSome(blockedAddress)) {
          return callback(
            new UnsafeWebhookTarget({
              url: hostname,
              reason: "BlockedAddress",
              detail: `${hostname} resolves to ${blockedAddress.value}`,
            }),
            [],
          )
        }
        return options.all
          ? callback(
              null,
              addresses.map((a): LookupAddress => ({ address: a.address, family: a.family })),
            )
          : callback(null, first.address, first.family)
      },
      (error: NodeJS.ErrnoException) => callback(error, []),
    )
  }

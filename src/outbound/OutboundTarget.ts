/**
 * Which URLs a webhook may be aimed at (the target policy), so that it cannot reach the inside of
 * our network (SSRF): https only, no credentials, IP literals and resolved addresses judged by
 * `AddressCheck`, hosts in `allowHosts` not judged at all.
 *
 * Checked twice, because DNS may answer differently between the two:
 * - `validateUrl`, when a webhook is created, for quick feedback: every address the host resolves
 *   to now must be allowed.
 * - `CheckedDialer.safeLookup`, when a delivery connects: the resolver used for the socket refuses
 *   a blocked address, so the address actually dialed is the one checked.
 *
 * Plain http is accepted only to a loopback host under `allowHttpLoopback`, which is meant for
 * tests and local development.
 */

import { promises as dns } from "node:dns"
import { isIP } from "node:net"
import { Effect, Option, Result, Schema } from "effect"
import { type AddressPolicy, checkAddress, firstBlocked, loopbackHint } from "./AddressCheck.ts"
import * as IpRange from "./IpRange.ts"

export { allowHttpLoopbackKey } from "./AddressCheck.ts"

export interface ResolvedAddress {
  readonly address: string
  readonly family: 4 | 6
}

/**
 * `allowHttpLoopback` also lets plain http to a loopback host through; `allowCidrs` entries must
 * parse (`invalidCidrs`).
 */
export interface TargetPolicy extends AddressPolicy {
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

/** The `allowCidrs` entries that do not parse as an address or a range. */
export const invalidCidrs = (cidrs: ReadonlyArray<string>): ReadonlyArray<string> =>
  cidrs.filter((cidr) => Option.isNone(IpRange.parseRange(cidr)))

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

export const isAllowedHost = (hostname: string, policy: Pick<TargetPolicy, "allowHosts">): boolean => {
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

/** Why a URL's scheme and host are refused, as `UnsafeWebhookTarget` says it; `undefined`: they pass. */
export type HostRefusal = readonly [reason: UnsafeWebhookTarget["reason"], detail: string] | undefined

/**
 * What `parseTarget` decides from a URL's scheme and host alone, the same for every URL that shares
 * them (a push service's endpoints differ only in their paths): the scheme is https (or http to a
 * loopback host under `allowHttpLoopback`), and an IP literal host is an allowed address.
 */
export const hostRefusal = (url: URL, policy: TargetPolicy): HostRefusal => {
  if (url.protocol === "http:") {
    if (!policy.allowHttpLoopback || !isLoopbackHost(url.hostname)) {
      return ["HttpNotAllowed", `plain http is refused; use https (${loopbackHint})`]
    }
  } else if (url.protocol !== "https:") {
    return ["BadScheme", `scheme ${url.protocol} is refused; use https`]
  }
  if (isAllowedHost(url.hostname, policy)) return undefined
  if (Option.isSome(IpRange.parseAddress(url.hostname))) {
    const why = checkAddress(url.hostname, policy)
    if (Option.isSome(why)) return ["BlockedAddress", `${unbracket(url.hostname)} is ${why.value}`]
  }
  return undefined
}

/**
 * Everything about a URL that can be decided without DNS: it parses, its scheme and host pass
 * (`hostRefusal`, which `refusalOf` may answer from a cache keyed by both), and it has no
 * credentials. WHATWG URL parsing has already turned numeric IPv4 forms (`http://2130706433/`,
 * `0x7f.1`) into dotted quads, so they are checked like any literal.
 *
 * The sender uses this alone before each delivery and leaves host names to `CheckedDialer.safeLookup`.
 */
export const parseTarget = (
  raw: string,
  policy: TargetPolicy,
  refusalOf: (url: URL) => HostRefusal = (url) => hostRefusal(url, policy),
): Result.Result<URL, UnsafeWebhookTarget> => {
  const url = URL.parse(raw)
  if (url === null) return Result.fail(refuse(raw, "BadUrl", "not an absolute URL"))
  const refusal = refusalOf(url)
  // A scheme refusal comes first, as it always did; the credentials before the host's address.
  if (refusal !== undefined && refusal[0] !== "BlockedAddress") return Result.fail(refuse(raw, ...refusal))
  if (url.username !== "" || url.password !== "") {
    return Result.fail(
      refuse(raw, "Credentials", "the URL carries a username or password; send secrets in headers instead"),
    )
  }
  return refusal === undefined ? Result.succeed(url) : Result.fail(refuse(raw, ...refusal))
}

const systemResolve = async (host: string): Promise<ReadonlyArray<ResolvedAddress>> =>
  (await dns.lookup(host, { all: true, verbatim: true })).map(({ address, family }) => ({
    address,
    family: family === 6 ? 6 : 4,
  }))

export const resolverOf = (policy: TargetPolicy) => policy.resolve ?? systemResolve

/**
 * Creation-time check of a webhook URL: `parseTarget`, then the host is resolved and every address
 * it has must be allowed (one private address among public ones is enough to refuse, since the
 * client may dial any of them). Hosts in `allowHosts` are not resolved.
 *
 * Passing here does not make later deliveries safe on its own: DNS can change, which is what
 * `CheckedDialer.safeLookup` is for.
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

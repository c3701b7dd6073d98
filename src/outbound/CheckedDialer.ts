/**
 * The checked dialer: the resolver a delivery's socket connects through, which refuses a blocked
 * address (`AddressCheck`) at connect time, so the address actually dialed is the one checked. A
 * host that answered with a public address when its webhook was created and a private one later
 * (DNS rebinding) is refused then. Host names in `allowHosts` are resolved but not checked.
 *
 * Node does not call `lookup` for IP literals; `OutboundTarget.parseTarget` covers those before
 * connecting.
 */
import type { LookupAddress, LookupOptions } from "node:dns"
import type { LookupFunction } from "node:net"
import { Option } from "effect"
import { firstBlocked } from "./AddressCheck.ts"
import {
  isAllowedHost,
  type ResolvedAddress,
  resolverOf,
  type TargetPolicy,
  UnsafeWebhookTarget,
} from "./OutboundTarget.ts"

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

/**
 * Keep-alive connections kept apart by TLS identity: the client certificate a connection
 * presented and the roots it trusted. A connection is reused only by requests that would have
 * made the very same handshake, so a request never rides on a connection another subscription's
 * client certificate opened, nor on one verified against another CA.
 *
 * Each identity gets its own `OutboundSender.Connections` (its own undici `Agent`, checked by the
 * same policy when dialing, with its own TLS session cache), made on first use and destroyed
 * when the scope that made the pool closes.
 */
import { Effect, Scope } from "effect"
import * as OutboundSender from "./OutboundSender.ts"
import type { TargetPolicy } from "./OutboundTarget.ts"

export interface IdentityConnections {
  /**
   * The connections of the identity named `key`, made with `options` on first use. The same key
   * must always come with the same options: name an identity by everything it is made of.
   */
  readonly of: (
    key: string,
    options: () => OutboundSender.ConnectionOptions,
  ) => Effect.Effect<OutboundSender.Connections>
}

/** A pool for the rest of the current scope. */
export const make = (policy: TargetPolicy) =>
  Effect.gen(function* () {
    const scope = yield* Effect.scope
    const pools = new Map<string, OutboundSender.Connections>()
    const of: IdentityConnections["of"] = (key, options) =>
      Effect.suspend(() => {
        const known = pools.get(key)
        if (known !== undefined) return Effect.succeed(known)
        return OutboundSender.connections(policy, {}, options()).pipe(
          Scope.provide(scope),
          Effect.tap((made) => Effect.sync(() => pools.set(key, made))),
        )
      })
    return { of } satisfies IdentityConnections
  })

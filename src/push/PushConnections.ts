/**
 * The connections a worker sends push messages on: one per push-service origin, HTTP/2 when the
 * service speaks it (the big ones do), so every message to that service is a stream on that one
 * connection instead of a connection, or a turn on one, of its own. HTTP/1.1 services get
 * keep-alive connections as before.
 *
 * What it keeps true: a connection is dialed through the checked dialer (`CheckedDialer`), so a
 * push endpoint whose host resolves to a blocked address (private, loopback unless the policy
 * allows it) is refused when connecting, over HTTP/2 as over HTTP/1.1.
 */
import * as OutboundSender from "../outbound/OutboundSender.ts"
import type { PushSettings } from "./PushConfig.ts"

/** Connections for the scope's lifetime, with `settings`' policy and extra trusted certificates. */
export const make = (settings: PushSettings, limits: Partial<OutboundSender.SendLimits>) =>
  OutboundSender.connections(settings.policy, limits, {
    http2: true,
    ...(settings.extraCa === undefined ? {} : { extraCa: settings.extraCa }),
  })

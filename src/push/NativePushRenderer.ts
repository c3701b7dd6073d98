/**
 * What an iOS or Android device is shown for one event: a service a host app replaces (provide
 * another `NativePushRenderer`) to word its notifications, turning (event, registration kind)
 * into the provider's payload. The default is in the context without being provided.
 *
 * The default names the event's type and space, as Web Push's envelope does (`PushEnvelope`), and
 * carries the same ids, so an app can fetch the details under its own rights:
 * - APNs: `aps.alert` (title the type, body the summary or the space), `thread-id` the space, the
 *   `apns-collapse-id` from the message's topic (`PushMessageKey.topic`: a re-sent copy replaces
 *   the first), `apns-push-type: alert`, `apns-expiration` from what is left of the TTL;
 * - FCM: `message.notification` plus `data` (strings only, as FCM wants), `android.collapse_key`
 *   from the same topic, and `android.ttl`.
 *
 * What it keeps true: the default stays far below both providers' 4 KiB (the summary is cut to
 * `maxSummary` characters, never inside a surrogate pair).
 */
import { Context } from "effect"
import type { NativeKind } from "./NativeRegistration.ts"
import { type EnvelopeInput, eventId } from "./PushEnvelope.ts"

/** The envelope's fields (`PushEnvelope`), and what native providers want besides. */
export interface RenderInput extends EnvelopeInput {
  /** `PushMessageKey.topic(key)`: 32 URL-safe characters, for collapse ids. */
  readonly topic: string
  /** What is left of the TTL, whole seconds. */
  readonly ttlSeconds: number
  /** When the message expires, Unix seconds. */
  readonly expiresAt: number
}

export interface ApnsMessage {
  readonly _tag: "apns"
  /** `apns-*` headers (`apns-push-type`, `apns-collapse-id`, `apns-expiration`, `apns-priority`); the sender adds `apns-topic`. */
  readonly headers: Readonly<Record<string, string>>
  /** The JSON body, with its `aps` dictionary. */
  readonly payload: Readonly<Record<string, unknown>>
}

export interface FcmMessage {
  readonly _tag: "fcm"
  /** The v1 `message` without its `token`, which the sender adds. */
  readonly message: Readonly<Record<string, unknown>>
}

export type NativeMessage = ApnsMessage | FcmMessage

export interface NativePushRendererShape {
  readonly render: (event: RenderInput, kind: NativeKind) => NativeMessage
}

/** Characters of a summary the default shows. */
export const maxSummary = 500

const cut = (text: string) => {
  const chars = Array.from(text)
  return chars.length <= maxSummary ? text : `${chars.slice(0, maxSummary).join("")}…`
}

/** The fields every default message carries, as strings. */
const ids = (event: RenderInput) => ({
  type: event.type,
  space: event.space,
  id: event.key,
  event: eventId(event.epoch, event.seq),
  timestamp: event.occurredAt.toISOString(),
})

export const defaultRender = (event: RenderInput, kind: NativeKind): NativeMessage => {
  const body = event.summary === null ? `in ${event.space}` : cut(event.summary)
  if (kind === "apns") {
    return {
      _tag: "apns",
      headers: {
        "apns-push-type": "alert",
        "apns-collapse-id": event.topic,
        "apns-expiration": String(event.expiresAt),
        "apns-priority": "10",
      },
      payload: { aps: { alert: { title: event.type, body }, "thread-id": event.space }, bothy: ids(event) },
    }
  }
  return {
    _tag: "fcm",
    message: {
      notification: { title: event.type, body },
      data: ids(event),
      android: { collapse_key: event.topic, ttl: `${event.ttlSeconds}s` },
    },
  }
}

export const NativePushRenderer = Context.Reference<NativePushRendererShape>("bothy/NativePushRenderer", {
  defaultValue: () => ({ render: defaultRender }),
})

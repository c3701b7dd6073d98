/**
 * What a subscription is made of, as a caller gives it (`NewSubscription`, `SubscriptionPatch`)
 * and reads it back (`Subscription`). Decoding refuses a bad field before any SQL runs, naming it
 * (`scope[3]`, `eventTypes[0]`, `filter.and[1].path`): event types are exact types or patterns
 * (`EventTypePatterns`), the filter is checked by `PayloadFilter`, endpoint credentials by
 * `EndpointCredentials` (whose secrets a `Subscription` never shows).
 */
import { Schema } from "effect"
import { storableCheck } from "../../platform/StorableText.ts"
import { fields as credentialFields, type EndpointAuthView } from "./EndpointCredentials.ts"
import { EventTypeOrPattern } from "./EventTypePatterns.ts"
import { type Filter, PayloadFilter } from "./PayloadFilter.ts"
import { ExtraHeaders, RateLimit } from "./SubscriptionOptions.ts"
import type { DisabledCause } from "./SubscriptionStates.ts"

/** The most spaces one subscription may cover. */
export const maxScope = 10_000
/** The most event types one subscription may list. */
export const maxEventTypes = 100

const Text = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(200), storableCheck)

const changeable = {
  url: Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(2048), storableCheck),
  /** Event types (exact) and patterns (`order.*`, `*`) to receive; empty for all. */
  eventTypes: Schema.Array(EventTypeOrPattern).check(
    Schema.isMaxLength(maxEventTypes, { message: `at most ${maxEventTypes} event types` }),
  ),
  /** Spaces whose events it may receive. */
  scope: Schema.Array(Text).check(
    Schema.isMinLength(1, { message: "at least one space" }),
    Schema.isMaxLength(maxScope, { message: `at most ${maxScope} spaces` }),
  ),
  /** Requests per second the drainer never exceeds for this endpoint; null or absent: no limit. */
  rateLimit: Schema.optional(Schema.NullOr(RateLimit)),
  /** Extra request headers; never one bothy sets itself. */
  headers: Schema.optional(ExtraHeaders),
  /** Only events whose payload it matches (`PayloadFilter`); null or absent: every payload. */
  filter: Schema.optional(Schema.NullOr(PayloadFilter)),
  /** OAuth2 client credentials, a client certificate, a custom CA (`EndpointCredentials`); null or absent: none. */
  ...credentialFields,
}

export const NewSubscription = Schema.Struct({ owner: Text, ...changeable })
export type NewSubscription = typeof NewSubscription.Type

/** What an update may change; absent fields stay as they are (`rateLimit: null` removes the limit). */
export const SubscriptionPatch = Schema.Struct({
  url: Schema.optional(changeable.url),
  eventTypes: Schema.optional(changeable.eventTypes),
  scope: Schema.optional(changeable.scope),
  rateLimit: changeable.rateLimit,
  headers: changeable.headers,
  /** A new filter; `null` removes it. */
  filter: changeable.filter,
  /** New endpoint credentials, each replacing the stored one whole; `null` removes it. */
  auth: changeable.auth,
  mtls: changeable.mtls,
  ca: changeable.ca,
})
export type SubscriptionPatch = typeof SubscriptionPatch.Type

export interface Subscription extends EndpointAuthView {
  readonly id: string
  readonly owner: string
  readonly url: string
  readonly eventTypes: ReadonlyArray<string>
  readonly scope: ReadonlyArray<string>
  readonly state: "active" | "disabled"
  readonly disabledCause: DisabledCause | null
  /**
   * Since when it is degraded (`SubscriptionHealth`): more of its attempts failed over the window
   * than the threshold allows. It still delivers. Null: healthy (and always while disabled).
   */
  readonly degradedSince: Date | null
  readonly startedSeq: bigint
  readonly lastDeliveredSeq: bigint
  /** The last `sequence` a delivery of the subscription took (numbers are taken when first sent). */
  readonly lastSequence: bigint
  readonly rateLimit: number | null
  /** Extra request headers, names in lower case. */
  readonly headers: Readonly<Record<string, string>>
  /** The payload filter, as given; null: every payload. */
  readonly filter: Filter | null
}

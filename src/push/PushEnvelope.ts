/**
 * What a browser's service worker gets for one event: a compact JSON envelope (`version`, `type`,
 * `space`, `id`, `tag`, `event`, `timestamp`, and a `summary` when the event's payload has a string
 * `summary`), at most `maxBytes` of UTF-8. The client fetches the details under its own rights, so
 * nothing else of the payload travels through the push service.
 *
 * - `id` and `tag` are the message's idempotency key (`PushMessageKey`): the same on every re-send
 *   of this event to this registration. A service worker passes `tag` to `showNotification`, so a
 *   repeat replaces the notification rather than adding one, or drops an `id` it saw lately.
 * - `event` is the event's epoch and seq (`"1.42"`): it never repeats across restores.
 *
 * Version 2: in version 1, `id` was the event's id and there was no `tag`.
 *
 * The envelope always fits: its other fields are at most a few hundred bytes (types and spaces are
 * capped at 200 characters), and the summary is cut, on a character boundary, to what is left.
 */
export const maxBytes = 3000

export interface EnvelopeInput {
  /** The message's idempotency key (`PushMessageKey.make`). */
  readonly key: string
  readonly type: string
  readonly space: string
  readonly epoch: number
  readonly seq: bigint
  readonly occurredAt: Date
  readonly summary: string | null
}

/** The envelope's format; 2 since `id` is the message's key and `event` the event's id. */
export const version = 2

export const eventId = (epoch: number, seq: bigint) => `${epoch}.${seq}`

const json = (input: EnvelopeInput, summary: string | undefined) =>
  JSON.stringify({
    version,
    type: input.type,
    space: input.space,
    id: input.key,
    tag: input.key,
    event: eventId(input.epoch, input.seq),
    timestamp: input.occurredAt.toISOString(),
    ...(summary === undefined ? {} : { summary }),
  })

const bytes = (text: string) => Buffer.byteLength(text, "utf8")

/** The envelope of one event, as the UTF-8 JSON text to encrypt. */
export const body = (input: EnvelopeInput): string => {
  if (input.summary === null) return json(input, undefined)
  const whole = json(input, input.summary)
  if (bytes(whole) <= maxBytes) return whole
  // The longest prefix, in code points (never half a surrogate pair), that fits with its ellipsis:
  // a binary search, since escapes make a character's JSON from 1 to 12 bytes.
  const chars = Array.from(input.summary)
  const cut = (n: number) => json(input, `${chars.slice(0, n).join("")}…`)
  let fits = 0
  let fails = chars.length
  while (fails - fits > 1) {
    const mid = (fits + fails) >> 1
    if (bytes(cut(mid)) <= maxBytes) fits = mid
    else fails = mid
  }
  const text = cut(fits)
  return bytes(text) <= maxBytes ? text : json(input, undefined)
}

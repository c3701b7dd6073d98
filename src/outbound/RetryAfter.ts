/** A `Retry-After` header (RFC 9110 §10.2.3): delay-seconds or an HTTP date. */

/** The delay it asks for at `now`, in milliseconds; `undefined` when absent or unreadable. */
export const millis = (raw: string | undefined, now: number): number | undefined => {
  if (raw === undefined) return undefined
  const trimmed = raw.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000
  const at = Date.parse(trimmed)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

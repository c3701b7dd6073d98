/** How the subscription pages write times, ages and durations: UTC, to the second, and short. */

/** `2026-12-05 23:57:19Z`, or "-". */
export const time = (at: Date | string | null | undefined) =>
  at === null || at === undefined ? "-" : `${new Date(at).toISOString().slice(0, 19).replace("T", " ")}Z`

/** `42 s`, `7 min`, `3 h`, `2 d`. */
export const age = (seconds: number) =>
  seconds < 120
    ? `${Math.round(seconds)} s`
    : seconds < 7200
      ? `${Math.round(seconds / 60)} min`
      : seconds < 172_800
        ? `${Math.round(seconds / 3600)} h`
        : `${Math.round(seconds / 86_400)} d`

/**
 * A time a form gave (`datetime-local`, read as UTC, or ISO 8601 with its zone); undefined when
 * empty, null when it is no time.
 */
export const parseTime = (text: string | null): Date | undefined | null => {
  if (text === null || text.trim() === "") return undefined
  const t = text.trim()
  const zoned = /(Z|[+-]\d\d:?\d\d)$/.test(t) ? t : `${t}Z`
  const at = new Date(zoned)
  return /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(t) && !Number.isNaN(at.getTime()) ? at : null
}

/** `2026-12-05T23:57` for a `datetime-local` input (UTC). */
export const inputTime = (at: Date | undefined) => (at === undefined ? "" : at.toISOString().slice(0, 16))

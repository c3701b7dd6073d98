/**
 * Text that PostgreSQL can hold. A `text` column refuses the NUL character, and `jsonb` refuses
 * both NUL (`\u0000`) and an unpaired UTF-16 surrogate (JSON.stringify writes one as `\ud800`,
 * which jsonb rejects); outside JSON the driver silently turns an unpaired surrogate into U+FFFD,
 * so a value would not come back as it went in.
 *
 * Two uses: input that must round-trip exactly is refused (`isStorable`, `storableCheck`), and
 * text we produce ourselves from whatever an error or a response held is made storable
 * (`storable`), so that one odd message can never fail the statement that records it.
 */
import { Schema } from "effect"

const nul = "\u0000"

/** Why `text` cannot be stored as it is, or `undefined` when it can. */
export const unstorable = (text: string): "a NUL character" | "an unpaired UTF-16 surrogate" | undefined =>
  text.includes(nul) ? "a NUL character" : text.isWellFormed() ? undefined : "an unpaired UTF-16 surrogate"

export const isStorable = (text: string): boolean => unstorable(text) === undefined

/** A `Schema` check for strings that must be stored exactly: no NUL, no unpaired surrogate. */
export const storableCheck = Schema.makeFilter<string>((text) => {
  const why = unstorable(text)
  return why === undefined ? undefined : `must not contain ${why}, which PostgreSQL cannot store`
})

/**
 * `text` made storable: NUL and unpaired surrogates become U+FFFD, and anything past `maxLength`
 * UTF-16 code units is cut (never inside a surrogate pair) and marked with an ellipsis.
 */
export const storable = (text: string, maxLength: number): string => {
  const clean = text.toWellFormed().replaceAll(nul, "\uFFFD")
  if (clean.length <= maxLength) return clean
  let end = Math.max(0, maxLength - 1)
  const last = clean.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end--
  return `${clean.slice(0, end)}…`
}

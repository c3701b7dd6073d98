/**
 * HTML built from template literals in which every interpolated value is escaped, unless it is
 * itself `Html` made here: text from the database (URLs, error texts, response bodies: user data)
 * can only ever land in a page as text, never as markup.
 */

const html$ = Symbol.for("bothy/admin/Html")

/** A fragment of markup, made by `html` (or `join` of such), safe to put in a page as it is. */
export interface Html {
  readonly [html$]: true
  readonly markup: string
}

const make = (markup: string): Html => ({ [html$]: true, markup })

const isHtml = (u: unknown): u is Html => typeof u === "object" && u !== null && html$ in u

const entities: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }

/** Text as it reads in an element or in a quoted attribute. */
export const escapeText = (text: string) => text.replace(/[&<>"']/g, (c) => entities[c]!)

/** What may stand in a `${...}`: markup, text, a number or bigint, a list of those; null and undefined render nothing. */
export type Value = Html | string | number | bigint | boolean | null | undefined | ReadonlyArray<Value>

const render = (value: Value): string => {
  if (value === null || value === undefined) return ""
  if (isHtml(value)) return value.markup
  if (Array.isArray(value)) return value.map(render).join("")
  return escapeText(String(value))
}

/** The template tag: literal parts are markup, values are escaped (see `Value`). */
export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Value>): Html =>
  make(strings.reduce((out, part, i) => out + part + (i < values.length ? render(values[i]!) : ""), ""))

/**
 * Data for a page's script, as `<script type="application/json">`: the browser never runs it, and
 * `<`, `>` and `&` are escaped inside the JSON so that no value can close the element.
 */
export const jsonData = (value: unknown): Html =>
  make(
    `<script type="application/json">${JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)}</script>`,
  )

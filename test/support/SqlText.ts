/**
 * The SQL a TypeScript module holds: the text of its `sql\`...\`` templates (any tag whose last name
 * is `sql`, so `drain.sql\`...\`` too) and of the string arguments of `.unsafe(...)` and
 * `sql.literal(...)`. Interpolations (`${...}`) count as a `?` in the text that holds them, and
 * templates nested inside them are fragments of their own. Types are stripped first (Node's
 * `stripTypeScriptTypes` keeps every offset), so `sql<Row>\`` reads as `sql\``.
 */
import { stripTypeScriptTypes } from "node:module"

export interface SqlFragment {
  /** 1-based line where the fragment starts. */
  readonly line: number
  readonly text: string
}

const isIdentifierChar = (c: string | undefined) => c !== undefined && /[\w$]/.test(c)

/** The SQL fragments of a module's source, in order of their start. */
export const fragments = (typescript: string): ReadonlyArray<SqlFragment> => {
  const source = stripTypeScriptTypes(typescript, { mode: "strip" })
  const found: Array<{ start: number; text: string }> = []
  let i = 0

  // Stripped generics leave blanks of any length between a tag and its backtick.
  const tagBefore = (at: number) => {
    let end = at
    while (end > 0 && /\s/.test(source[end - 1]!)) end--
    let start = end
    while (start > 0 && /[\w$.]/.test(source[start - 1]!)) start--
    return source.slice(start, end)
  }
  const isSqlTag = (tag: string) => tag === "sql" || tag.endsWith(".sql")
  const isSqlCall = (at: number) => /(\.unsafe|\bsql\.literal)\(\s*$/.test(source.slice(Math.max(0, at - 40), at))

  const skipQuoted = (quote: string): string => {
    const start = ++i
    while (i < source.length && source[i] !== quote) i += source[i] === "\\" ? 2 : 1
    return source.slice(start, i++)
  }

  // At a backtick: reads the template, scanning its interpolations as code; gives its static text.
  const template = (): string => {
    let text = ""
    i++
    while (i < source.length && source[i] !== "`") {
      if (source[i] === "\\") {
        text += source.slice(i, i + 2)
        i += 2
      } else if (source[i] === "$" && source[i + 1] === "{") {
        i += 2
        code(true)
        text += " ? "
      } else text += source[i++]
    }
    i++
    return text
  }

  // Scans code until the end, or (inside an interpolation) until its closing brace.
  const code = (inInterpolation: boolean) => {
    let depth = 0
    while (i < source.length) {
      const c = source[i]!
      if (c === "/" && source[i + 1] === "/")
        i = source.indexOf("\n", i) === -1 ? source.length : source.indexOf("\n", i)
      else if (c === "/" && source[i + 1] === "*") i = source.indexOf("*/", i + 2) + 2 || source.length
      else if (c === '"' || c === "'") {
        const start = i
        const text = skipQuoted(c)
        if (isSqlCall(start)) found.push({ start, text })
      } else if (c === "`") {
        const start = i
        const sqlTemplate = isSqlTag(tagBefore(start)) || isSqlCall(start)
        const text = template()
        if (sqlTemplate) found.push({ start, text })
      } else if (c === "{") {
        depth++
        i++
      } else if (c === "}") {
        i++
        if (inInterpolation && depth-- === 0) return
      } else if (isIdentifierChar(c)) {
        while (isIdentifierChar(source[i])) i++
      } else i++
    }
  }

  code(false)
  const lineAt = (offset: number) => source.slice(0, offset).split("\n").length
  return found.sort((a, b) => a.start - b.start).map(({ start, text }) => ({ line: lineAt(start), text }))
}

/** The text with SQL comments (`-- ...` to the end of the line, `/* ... *\/`) left out. */
export const withoutComments = (sql: string) => sql.replace(/--[^\n]*/g, " ").replace(/\/\*[\s\S]*?\*\//g, " ")

const targetKeywords = new Set(["from", "join", "into", "update", "table", "using", "references", "only", "lock"])
const listKeywords = new Set(["from", "using"])
// Words that end a FROM list item's alias position (a clause or a join begins).
const clauseWords = new Set([
  "where",
  "join",
  "left",
  "right",
  "inner",
  "full",
  "cross",
  "natural",
  "on",
  "group",
  "order",
  "limit",
  "for",
  "union",
  "except",
  "intersect",
  "returning",
  "having",
  "window",
  "offset",
  "lateral",
  "set",
  "as",
])

/**
 * The relations a statement's text names where a table goes: after FROM, JOIN, INTO, UPDATE,
 * TABLE, USING, REFERENCES, ONLY, LOCK, each further item of a FROM or USING list
 * (`FROM a x, b y`), a `'name'::regclass`, and a function called by name (`name(`). Column names
 * and CTE references elsewhere in the text do not count: `webhook_deliveries.event_seq` is a
 * column, not the `event_seq` table.
 */
export const targets = (sql: string): ReadonlySet<string> => {
  const text = withoutComments(sql)
  const found = new Set<string>()
  for (const [, name] of text.matchAll(/'([a-z_][\w]*)'::regclass/gi)) found.add(name!.toLowerCase())
  for (const [, name] of text.matchAll(/(?<![.\w$])([a-z_]\w*)\s*\(/gi)) found.add(name!.toLowerCase())
  const tokens = [...text.matchAll(/[a-z_][\w.]*|"[^"]*"|'(?:[^']|'')*'|\S/gi)].map(([t]) => t.toLowerCase())
  for (let at = 0; at < tokens.length; at++) {
    const word = tokens[at]!
    if (!targetKeywords.has(word)) continue
    let next = at + 1
    while (tokens[next] === "only" || tokens[next] === "table") next++
    const add = (token: string | undefined) => {
      if (token !== undefined && /^[a-z_]/.test(token)) found.add(token.replace(/^public\./, ""))
    }
    add(tokens[next])
    if (!listKeywords.has(word)) continue
    // FROM a [AS] [x], b [AS] [y], ...: skip the alias, then take the item after each comma.
    for (;;) {
      next++
      if (tokens[next] === "as") next++
      if (tokens[next] !== undefined && /^[a-z_]/.test(tokens[next]!) && !clauseWords.has(tokens[next]!)) next++
      if (tokens[next] !== ",") break
      next++
      add(tokens[next])
    }
  }
  return found
}

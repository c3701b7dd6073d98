/**
 * A subscription's payload filter: a small JSON language over JSON paths, checked when it is
 * written and compiled to one SQL/JSON path predicate (`jsonpath`), which the `webhooks` round
 * evaluates against each event's payload inside its one statement (`payload @@ filter_path`). The
 * statement's text stays the same whatever the filters are; only the stored predicates differ.
 *
 *   filter := { "and": [filter, ...] } | { "or": [filter, ...] } | { "not": filter }
 *           | { "path": path, op: value }      (exactly one op)
 *   op     := eq (a scalar) | in (scalars) | exists (a boolean)
 *           | gt | gte | lt | lte (a number or a string) | startsWith (a string)
 *   path   := "$" then steps, each `.name` (letters, digits, _) or `["any name"]`
 *
 * What it keeps true: every leaf compiles to `exists(path ? (...))` (or `exists(path)`), which is
 * true or false, never SQL/JSON's unknown; so `not`, `and` and `or` are plain boolean logic and
 * the reference semantics in docs/webhooks.md (a path step through an array goes into each element,
 * a comparison with an array compares each element, values of different JSON types never match)
 * is what PostgreSQL's lax mode evaluates. Strings compare by code point, numbers by value.
 */
import { Schema } from "effect"
import { unstorable } from "../../platform/StorableText.ts"

export type Scalar = string | number | boolean | null

/** A payload filter (see the module header). */
export type Filter =
  | { readonly and: ReadonlyArray<Filter> }
  | { readonly or: ReadonlyArray<Filter> }
  | { readonly not: Filter }
  | { readonly path: string; readonly eq: Scalar }
  | { readonly path: string; readonly in: ReadonlyArray<Scalar> }
  | { readonly path: string; readonly exists: boolean }
  | { readonly path: string; readonly gt: number | string }
  | { readonly path: string; readonly gte: number | string }
  | { readonly path: string; readonly lt: number | string }
  | { readonly path: string; readonly lte: number | string }
  | { readonly path: string; readonly startsWith: string }

/** The bounds a filter keeps: its nodes, its depth, a list's length, a path's steps, a string's length. */
export const limits = { nodes: 64, depth: 8, list: 100, steps: 16, text: 200 } as const

export const operators = ["eq", "in", "exists", "gt", "gte", "lt", "lte", "startsWith"] as const
export type Operator = (typeof operators)[number]

const jsonpathOperator = { gt: ">", gte: ">=", lt: "<", lte: "<=" } as const

/** Where a filter is refused, below its root, and why. */
export interface FilterIssue {
  readonly path: ReadonlyArray<string | number>
  readonly issue: string
}

const plainStep = /^\.([A-Za-z_][A-Za-z0-9_]*)/
const quotedStep = /^\[("(?:[^"\\]|\\.)*")\]/

/** The names a path's steps select, or why it is not a path. */
export const parsePath = (path: string): ReadonlyArray<string> | string => {
  if (!path.startsWith("$")) return 'a path starts with "$"'
  const names: Array<string> = []
  let rest = path.slice(1)
  while (rest !== "") {
    const plain = plainStep.exec(rest)
    const quoted = plain === null ? quotedStep.exec(rest) : null
    const match = plain ?? quoted
    if (match === null) return `cannot read the path at "${rest.slice(0, 20)}": a step is .name or ["name"]`
    let name: unknown = match[1]
    if (quoted !== null) {
      try {
        name = JSON.parse(match[1]!)
      } catch {
        return `the step ${match[0]} is not a JSON string in brackets`
      }
    }
    if (typeof name !== "string" || name.length > limits.text)
      return `a step's name is at most ${limits.text} characters`
    const why = unstorable(name)
    if (why !== undefined) return `a step's name must not contain ${why}`
    names.push(name)
    rest = rest.slice(match[0].length)
  }
  return names.length > limits.steps ? `a path has at most ${limits.steps} steps` : names
}

const isScalar = (value: unknown): value is Scalar =>
  value === null ||
  typeof value === "boolean" ||
  (typeof value === "number" && Number.isFinite(value)) ||
  (typeof value === "string" && value.length <= limits.text && unstorable(value) === undefined)

const scalarIssue = `a string (at most ${limits.text} characters), a finite number, true, false or null`

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The issue of an operator's value, or `undefined` when it is one. */
const operandIssue = (op: Operator, value: unknown): FilterIssue | undefined => {
  const at = (issue: string, path: ReadonlyArray<string | number> = [op]) => ({ path, issue })
  switch (op) {
    case "eq":
      return isScalar(value) ? undefined : at(`eq takes ${scalarIssue}`)
    case "in":
      if (!Array.isArray(value) || value.length === 0 || value.length > limits.list) {
        return at(`in takes a list of 1 to ${limits.list} values`)
      }
      for (const [i, item] of value.entries()) if (!isScalar(item)) return at(`each value is ${scalarIssue}`, [op, i])
      return undefined
    case "exists":
      return typeof value === "boolean" ? undefined : at("exists takes true or false")
    case "startsWith":
      return typeof value === "string" && isScalar(value) ? undefined : at("startsWith takes a string")
    default:
      return (typeof value === "number" || typeof value === "string") && isScalar(value)
        ? undefined
        : at(`${op} takes a finite number or a string`)
  }
}

const prefixed = (step: string | number, issue: FilterIssue): FilterIssue => ({
  path: [step, ...issue.path],
  issue: issue.issue,
})

/** The first issue of a filter node at `depth`, counting nodes in `seen`. */
const nodeIssue = (node: unknown, depth: number, seen: { nodes: number }): FilterIssue | undefined => {
  seen.nodes++
  if (seen.nodes > limits.nodes) return { path: [], issue: `a filter has at most ${limits.nodes} conditions` }
  if (depth > limits.depth) return { path: [], issue: `a filter nests at most ${limits.depth} deep` }
  if (!isObject(node)) return { path: [], issue: "a filter is an object: and, or, not, or a path and an operator" }
  const keys = Object.keys(node)
  const logical = keys.filter((k) => k === "and" || k === "or" || k === "not")
  if (logical.length > 0) {
    if (keys.length !== 1) return { path: [], issue: `${logical[0]} stands alone in its object` }
    if (logical[0] === "not") {
      const inner = nodeIssue(node.not, depth + 1, seen)
      return inner === undefined ? undefined : prefixed("not", inner)
    }
    const key = logical[0]!
    const list = node[key]
    if (!Array.isArray(list) || list.length === 0 || list.length > limits.list) {
      return { path: [key], issue: `${key} takes a list of 1 to ${limits.list} filters` }
    }
    for (const [i, item] of list.entries()) {
      const inner = nodeIssue(item, depth + 1, seen)
      if (inner !== undefined) return prefixed(key, prefixed(i, inner))
    }
    return undefined
  }
  const unknown = keys.find((k) => k !== "path" && !(operators as ReadonlyArray<string>).includes(k))
  if (unknown !== undefined)
    return { path: [unknown], issue: `unknown key; use path with one of ${operators.join(", ")}` }
  if (typeof node.path !== "string") return { path: ["path"], issue: 'a condition names a path ("$.a.b")' }
  const steps = parsePath(node.path)
  if (typeof steps === "string") return { path: ["path"], issue: steps }
  const ops = keys.filter((k) => k !== "path") as Array<Operator>
  if (ops.length !== 1) return { path: [], issue: `a condition has exactly one of ${operators.join(", ")}` }
  return operandIssue(ops[0]!, node[ops[0]!])
}

/** The first thing wrong with `input` as a filter (its path below the filter), or `undefined`. */
export const issue = (input: unknown): FilterIssue | undefined => nodeIssue(input, 1, { nodes: 0 })

/** A filter as a subscription takes it: refused with the path of the first thing wrong in it. */
export const PayloadFilter = Schema.Json.check(
  Schema.makeFilter((input) => {
    const found = issue(input)
    return found === undefined ? undefined : [{ path: found.path, issue: found.issue }]
  }),
)

const literal = (value: Scalar): string => (typeof value === "number" ? String(value) : JSON.stringify(value))

const pathText = (path: string): string =>
  `$${(parsePath(path) as ReadonlyArray<string>).map((name) => `.${JSON.stringify(name)}`).join("")}`

const leaf = (path: string, predicate: string) => `exists(${pathText(path)} ? (${predicate}))`

/**
 * The SQL/JSON path predicate of a valid filter (`issue` found nothing), for `payload @@ it`.
 * Lax mode (the default) throughout: see the module header.
 */
export const compile = (filter: Filter): string => {
  if ("and" in filter) return `(${filter.and.map(compile).join(" && ")})`
  if ("or" in filter) return `(${filter.or.map(compile).join(" || ")})`
  if ("not" in filter) return `!(${compile(filter.not)})`
  if ("eq" in filter) return leaf(filter.path, `@ == ${literal(filter.eq)}`)
  if ("in" in filter) return leaf(filter.path, filter.in.map((v) => `@ == ${literal(v)}`).join(" || "))
  if ("exists" in filter) {
    return filter.exists ? `exists(${pathText(filter.path)})` : `!(exists(${pathText(filter.path)}))`
  }
  if ("startsWith" in filter) return leaf(filter.path, `@ starts with ${literal(filter.startsWith)}`)
  const op = (["gt", "gte", "lt", "lte"] as const).find((k) => k in filter)!
  return leaf(filter.path, `@ ${jsonpathOperator[op]} ${literal((filter as unknown as Record<typeof op, Scalar>)[op])}`)
}

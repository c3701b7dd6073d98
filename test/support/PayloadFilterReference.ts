/**
 * A reference evaluator of payload filters, written from the semantics docs/webhooks.md states
 * (not from the compiled SQL/JSON path): the property test `FilterMatchesInRound` checks that the
 * round's SQL agrees with it.
 *
 * - A path selects values: from the payload, each step `.name` takes the member `name` of an object;
 *   of an array, the member `name` of each element that is an object (one level).
 * - A comparison holds when any selected value holds it, where a selected array stands for its
 *   elements, and an array among those for its own elements (two levels in all).
 * - Values of different JSON types never compare; strings compare by code point, numbers by value.
 * - `exists` holds when the path selects anything (a null member included).
 */
import type { Schema } from "effect"
import type { Filter, Scalar } from "../../src/webhooks/subscriptions/PayloadFilter.ts"

type Json = Schema.Json

/** The names of a path's steps (`$.a["b c"]` is `a`, `b c`). */
const steps = (path: string): Array<string> => {
  const names: Array<string> = []
  const step = /\.([A-Za-z_][A-Za-z0-9_]*)|\[("(?:[^"\\]|\\.)*")\]/y
  step.lastIndex = 1
  while (step.lastIndex < path.length) {
    const m = step.exec(path)
    if (m === null) throw new Error(`not a path: ${path}`)
    names.push(m[1] ?? (JSON.parse(m[2]!) as string))
  }
  return names
}

const isObject = (v: Json): v is { readonly [k: string]: Json } =>
  typeof v === "object" && v !== null && !Array.isArray(v)

const member = (v: Json, name: string): Array<Json> => (isObject(v) && Object.hasOwn(v, name) ? [v[name]!] : [])

export const select = (payload: Json, path: string): Array<Json> =>
  steps(path).reduce<Array<Json>>(
    (values, name) => values.flatMap((v) => (Array.isArray(v) ? v.flatMap((e) => member(e, name)) : member(v, name))),
    [payload],
  )

const elements = (v: Json): Array<Json> => (Array.isArray(v) ? [...v] : [v])

const items = (payload: Json, path: string): Array<Json> => select(payload, path).flatMap(elements).flatMap(elements)

/** -1, 0 or 1 by code point (not by UTF-16 unit, as `<` on strings compares). */
const codePointOrder = (a: string, b: string): number => {
  const x = [...a].map((c) => c.codePointAt(0)!)
  const y = [...b].map((c) => c.codePointAt(0)!)
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! < y[i]! ? -1 : 1
  return Math.sign(x.length - y.length)
}

/** The order of two values of one type (numbers or strings), or `undefined` when they do not compare. */
const order = (a: Json, b: Scalar): number | undefined => {
  if (typeof a === "number" && typeof b === "number") return Math.sign(a - b)
  if (typeof a === "string" && typeof b === "string") return codePointOrder(a, b)
  return undefined
}

const equal = (a: Json, b: Scalar): boolean =>
  a === null || b === null ? a === b : typeof a === typeof b && typeof a !== "object" && a === b

const anyItem = (payload: Json, path: string, test: (v: Json) => boolean) => items(payload, path).some(test)

export const evaluate = (filter: Filter, payload: Json): boolean => {
  if ("and" in filter) return filter.and.every((f) => evaluate(f, payload))
  if ("or" in filter) return filter.or.some((f) => evaluate(f, payload))
  if ("not" in filter) return !evaluate(filter.not, payload)
  const { path } = filter
  if ("exists" in filter) return select(payload, path).length > 0 === filter.exists
  if ("eq" in filter) return anyItem(payload, path, (v) => equal(v, filter.eq))
  if ("in" in filter) return anyItem(payload, path, (v) => filter.in.some((w) => equal(v, w)))
  if ("startsWith" in filter) {
    return anyItem(payload, path, (v) => typeof v === "string" && v.startsWith(filter.startsWith))
  }
  const [op, bound] = Object.entries(filter).find(([k]) => k !== "path") as [string, Scalar]
  const holds = {
    gt: (o: number) => o > 0,
    gte: (o: number) => o >= 0,
    lt: (o: number) => o < 0,
    lte: (o: number) => o <= 0,
  }[op]!
  return anyItem(payload, path, (v) => {
    const o = order(v, bound)
    return o !== undefined && holds(o)
  })
}

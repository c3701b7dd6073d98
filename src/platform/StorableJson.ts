/**
 * JSON that bothy stores in a `jsonb` column (an event's payload, a job's args), checked before
 * any SQL so that a bad value is a typed error naming its place, not an `SqlError` or a defect:
 *
 * - at most `maxDepth` arrays and objects nested in each other: `JSON.stringify` recurses, and a
 *   value nested some thousands deep overflows the stack (a `RangeError` defect);
 * - at most `maxValues` values in all, counted as JSON would write them (a value reached twice
 *   counts twice), so that a small shared structure cannot expand into gigabytes of JSON;
 * - no key or string that PostgreSQL cannot hold (`StorableText`: NUL, an unpaired surrogate).
 *
 * The walk keeps its own stack and stops at the first problem, so no input can overflow it.
 * It expects a value `Schema.Json` accepted (no cycles, functions or bigints).
 */
import { Option, type Schema } from "effect"
import { fieldPath } from "./FieldIssue.ts"
import { unstorable } from "./StorableText.ts"

export interface Limits {
  readonly maxDepth: number
  readonly maxValues: number
}

export interface Problem {
  readonly _tag: "TooDeep" | "TooManyValues" | "NotStorable"
  /** Where, under the root name the caller gave (`payload.a[2]`). */
  readonly field: string
  readonly detail: string
}

interface Frame {
  readonly value: unknown
  /** The container holding `value` and its key there: the path is only built for a problem. */
  readonly parent: Frame | undefined
  readonly key: PropertyKey | undefined
  /** Containers around `value`, itself excluded. */
  readonly depth: number
}

const pathOf = (frame: Frame, last?: PropertyKey): ReadonlyArray<PropertyKey> => {
  const keys: Array<PropertyKey> = last === undefined ? [] : [last]
  for (let f: Frame | undefined = frame; f?.parent !== undefined; f = f.parent) keys.push(f.key!)
  return keys.reverse()
}

const notStorable = (field: string, what: string, why: string): Problem => ({
  _tag: "NotStorable",
  field,
  detail: `${what} contains ${why}, which PostgreSQL cannot store`,
})

/** The first problem of `value` (named `root` in messages), or `None` when it may be stored. */
export const check = (value: Schema.Json, root: string, limits: Limits): Option.Option<Problem> => {
  const stack: Array<Frame> = [{ value, parent: undefined, key: undefined, depth: 0 }]
  let values = 1
  while (stack.length > 0) {
    const frame = stack.pop()!
    const at = () => fieldPath(root, pathOf(frame))
    if (typeof frame.value === "string") {
      const why = unstorable(frame.value)
      if (why !== undefined) return Option.some(notStorable(at(), "the string", why))
      continue
    }
    if (typeof frame.value !== "object" || frame.value === null) continue
    const depth = frame.depth + 1
    if (depth > limits.maxDepth) {
      return Option.some({
        _tag: "TooDeep",
        field: at(),
        detail: `arrays and objects nest deeper than ${limits.maxDepth} levels`,
      })
    }
    const entries: ReadonlyArray<readonly [PropertyKey, unknown]> = Array.isArray(frame.value)
      ? frame.value.map((item, i) => [i, item] as const)
      : Object.entries(frame.value)
    values += entries.length
    if (values > limits.maxValues) {
      return Option.some({
        _tag: "TooManyValues",
        field: at(),
        detail: `holds more than ${limits.maxValues} values`,
      })
    }
    for (const [key] of entries) {
      const why = typeof key === "string" ? unstorable(key) : undefined
      if (why !== undefined) return Option.some(notStorable(fieldPath(root, pathOf(frame, key)), "the key", why))
    }
    // Reversed, so that the first entry is checked first and the first problem is the one reported.
    for (let i = entries.length - 1; i >= 0; i--) {
      const [key, item] = entries[i]!
      stack.push({ value: item, parent: frame, key, depth })
    }
  }
  return Option.none()
}

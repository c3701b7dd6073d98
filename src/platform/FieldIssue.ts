/**
 * Which field of an input was refused, and why, in one line: every typed input error
 * (`InvalidEvent`, `InvalidJob`, `InvalidSubscription`) names the field (`scope[3]`,
 * `payload.items[0].name`), so a caller can tell which of its values to fix.
 */
import { type Schema, SchemaIssue } from "effect"

export interface FieldIssue {
  /** Where in the input: `space`, `eventTypes[2]`, `args.to["a b"]`; the root alone for the whole value. */
  readonly field: string
  readonly detail: string
}

const identifier = /^[A-Za-z_$][A-Za-z0-9_$]*$/

/** `root` followed by `path`: `payload.items[0]["a b"]`. Keys are JSON-quoted unless plain. */
export const fieldPath = (root: string, path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((at, key) => {
    if (typeof key === "number") return `${at}[${key}]`
    const name = String(key)
    if (!identifier.test(name)) return `${at}[${JSON.stringify(name)}]`
    return at === "" ? name : `${at}.${name}`
  }, root)

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

/** The first problem of a failed decode, under `root` (`args` for a job's args, say). */
export const firstIssue = (error: Schema.SchemaError, root = ""): FieldIssue => {
  const [first] = formatter(error.issue).issues
  if (first === undefined) return { field: root, detail: error.message }
  return { field: fieldPath(root, first.path as ReadonlyArray<PropertyKey>), detail: first.message }
}

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

/**
 * The paths of the keys a decode with `onExcessProperty: "error"` found and no schema declares
 * (`eventType` where `eventTypes` was meant), in input order.
 */
export const unknownFields = (issue: SchemaIssue.Issue): ReadonlyArray<ReadonlyArray<PropertyKey>> => {
  const found: Array<ReadonlyArray<PropertyKey>> = []
  const walk = (at: SchemaIssue.Issue, path: ReadonlyArray<PropertyKey>): void => {
    switch (at._tag) {
      case "UnexpectedKey":
        found.push(path)
        return
      case "Pointer":
        walk(at.issue, [...path, ...at.path])
        return
      case "Filter":
      case "Encoding":
        walk(at.issue, path)
        return
      case "Composite":
      case "AnyOf":
        for (const inner of at.issues) walk(inner, path)
        return
      default:
        return
    }
  }
  walk(issue, [])
  return found
}

/**
 * The first problem of a failed decode, under `root` (`args` for a job's args, say). Keys the
 * schema does not declare come first and all of them are named in `detail`: a misspelt field is
 * the likeliest mistake, and the one a caller otherwise never hears of.
 */
export const firstIssue = (error: Schema.SchemaError, root = ""): FieldIssue => {
  const unknown = unknownFields(error.issue).map((path) => fieldPath(root, path))
  if (unknown.length > 0) {
    return {
      field: unknown[0]!,
      detail: `unknown field${unknown.length === 1 ? "" : "s"} ${unknown.join(", ")}: not part of this input (check the spelling)`,
    }
  }
  const [first] = formatter(error.issue).issues
  if (first === undefined) return { field: root, detail: error.message }
  return { field: fieldPath(root, first.path as ReadonlyArray<PropertyKey>), detail: first.message }
}

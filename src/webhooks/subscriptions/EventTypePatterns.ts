/**
 * The event types a subscription names: exact types (`order.created`) and patterns, a type's
 * leading segments followed by `.*` (`order.*`: every type that begins with `order.`, however many
 * segments follow) or `*` alone (every type, as an empty list is). A pattern matches at a segment
 * boundary only: `order.*` never matches `orders.created` nor `order` itself.
 *
 * What it keeps true: the round matches with `type LIKE ANY (type_patterns)`, and the stored LIKE
 * patterns are derived here from the names as given (`likePattern`), escaping `_` (an event type's
 * only LIKE metacharacter), so the SQL match and `matches` agree on every type. With the event-type
 * catalog on, a name must be a type of it or a pattern that matches one (`unknownName`).
 */
import { Effect, Schema } from "effect"
import { eventTypePattern, maxTextLength } from "../../log/Event.ts"
import * as EventTypeCatalog from "../../log/EventTypeCatalog.ts"
import * as OperationalEvents from "./OperationalEvents.ts"

const wildcard = /^([A-Za-z0-9][A-Za-z0-9_.:-]*\.)\*$/

/** An exact event type, `<segments>.*`, or `*`. */
export const EventTypeOrPattern = Schema.String.check(
  Schema.isNonEmpty(),
  Schema.isMaxLength(maxTextLength),
  Schema.makeFilter(
    (name) =>
      name === "*" ||
      eventTypePattern.test(name) ||
      wildcard.test(name) ||
      "must be an event type (letters, digits and _.:- starting with a letter or digit), a type's leading segments followed by .* (order.*), or * alone",
  ),
)

/** Whether `name` is a pattern rather than an exact type. */
export const isPattern = (name: string) => name.endsWith("*")

/** The prefix a pattern stands for (`order.` for `order.*`, empty for `*`). */
const prefixOf = (pattern: string) => pattern.slice(0, -1)

/** Whether the type or pattern `name` matches the event type `type`. */
export const matches = (name: string, type: string): boolean =>
  isPattern(name) ? type.startsWith(prefixOf(name)) && type.length > prefixOf(name).length : name === type

/** The LIKE pattern the round matches `name` with (`\` is LIKE's default escape). */
export const likePattern = (name: string): string => {
  const escaped = (text: string) => text.replaceAll("\\", "\\\\").replaceAll("%", "\\%").replaceAll("_", "\\_")
  return isPattern(name) ? `${escaped(prefixOf(name))}_%` : escaped(name)
}

/** The stored LIKE patterns of a subscription's names; empty names: every type. */
export const likePatterns = (names: ReadonlyArray<string>): Array<string> =>
  names.length === 0 ? ["%"] : names.map(likePattern)

/**
 * With the event-type catalog on (it holds a type), the first of `names` that is no type of it and
 * no pattern that matches one, as the field it stands at and why; `undefined` when all are known
 * (or the catalog is off, or `names` is empty: every type).
 */
export const unknownName = (names: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    if (names.length === 0) return undefined
    const own = yield* EventTypeCatalog.knownNames
    if (own.length === 0) return undefined
    // bothy's own types are always known once the catalog is on (`OperationalEvents`).
    const known = [...own, ...OperationalEvents.names]
    const i = names.findIndex((name) => !known.some((type) => matches(name, type)))
    if (i < 0) return undefined
    return {
      field: `eventTypes[${i}]`,
      detail: isPattern(names[i]!)
        ? `${names[i]} matches no type of the event-type catalog`
        : `${names[i]} is not in the event-type catalog`,
    }
  })

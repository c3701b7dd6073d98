/**
 * A UUID as text, in any letter case: what a `uuid` column accepts. Checked before such a value is
 * bound as `::uuid`, so a malformed id is a typed "not found" or a refused job argument instead of
 * an SQL error.
 */
import { Schema } from "effect"

const pattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export const Uuid = Schema.String.check(Schema.isPattern(pattern, { message: "expected a UUID" }))

export const isUuid = (text: string): boolean => pattern.test(text)

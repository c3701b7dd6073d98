/**
 * What PostgreSQL said about a failed statement. `SqlError` classifies errors by SQLSTATE class;
 * some conditions need the exact code (and, where PostgreSQL shares a code between conditions,
 * its message).
 */
import { Predicate } from "effect"
import type { SqlError } from "effect/sql/SqlError"

export interface PgFailure {
  readonly code: string | undefined
  readonly message: string
}

export const pgFailure = (error: SqlError): PgFailure => {
  const fields: unknown = error.reason.cause
  const code = Predicate.hasProperty(fields, "code") && Predicate.isString(fields.code) ? fields.code : undefined
  const message = fields instanceof Error ? fields.message : error.message
  return { code, message }
}

/** `23514` with this message: the row's partition key has no partition (there is no default one). */
export const isNoPartition = (error: SqlError) => {
  const { code, message } = pgFailure(error)
  return code === "23514" && message.includes("no partition of relation")
}

/**
 * The statement was refused for the values it carries, so running it again as it is fails again:
 * a data exception (class `22`: a value out of range or malformed, text `jsonb` cannot hold), an
 * integrity constraint (`23`), a program limit (`54`: too large), or an error raised by a function
 * or trigger (`P0`). Anything else (a lost connection, a timeout, a lock, a permission) says
 * nothing about the values.
 */
export const isRefusedValue = (error: SqlError) => {
  const { code } = pgFailure(error)
  return code !== undefined && ["22", "23", "54", "P0"].includes(code.slice(0, 2))
}

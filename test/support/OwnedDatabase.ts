/**
 * A database as a managed service gives one: a login role that is not superuser, may not create
 * databases or roles and holds no predefined role, owner of an empty database and of nothing else.
 * Both are dropped with the scope.
 */
import { randomUUID } from "node:crypto"
import { Effect } from "effect"
import { inject } from "vitest"
import { withDatabase } from "../../testkit/DatabaseUrl.ts"
import * as TestDatabase from "./TestDatabase.ts"

export interface OwnedDatabase {
  readonly role: string
  readonly password: string
  /** The database's name. */
  readonly name: string
  /** Its URL, as the role. */
  readonly url: string
}

export const make = Effect.gen(function* () {
  const role = `bothy_app_${randomUUID().slice(0, 8)}`
  const password = randomUUID()
  const name = `t_${role}`
  yield* Effect.acquireRelease(
    TestDatabase.adminSql(`CREATE ROLE ${role} LOGIN PASSWORD '${password}' NOSUPERUSER NOCREATEDB NOCREATEROLE`),
    () => TestDatabase.adminSql(`DROP ROLE IF EXISTS ${role}`).pipe(Effect.ignore),
  )
  yield* Effect.acquireRelease(TestDatabase.adminSql(`CREATE DATABASE "${name}" OWNER ${role}`), () =>
    TestDatabase.adminSql(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`).pipe(Effect.ignore),
  )
  const url = new URL(withDatabase(inject("pgAdminUrl"), name))
  url.username = role
  url.password = password
  return { role, password, name, url: url.toString() } satisfies OwnedDatabase
})

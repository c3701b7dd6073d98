/**
 * One PostgreSQL per test project: the embedded server (`TestServer`) of the project's major
 * (`PostgresMatrix`), or, for bothy's own major, the server `DATABASE_URL_TEST` points at. If it
 * cannot start, the run fails with one line saying why. Migrations are applied once to a template
 * database (`MigratedDatabase`); each test file clones it (see `TestDatabase`).
 *
 * The run can go through a pooler, as users run bothy: `DATABASE_URL_TEST` may point at one, with
 * `DATABASE_DIRECT_URL_TEST` at the server behind it, or `BOTHY_TEST_POOLER=transaction` (or
 * `session`) starts PgBouncer (`testkit/Pooler`) in front of the server. Databases are then made and
 * dropped over the direct connection (through a pooler, `CREATE DATABASE ... TEMPLATE` fails while
 * the pool holds a server connection to the template), and the code under test connects through
 * the pooler (`pgUrl`).
 */
import { Effect, Exit, Scope } from "effect"
import type { TestProject } from "vitest/node"
import * as MigratedDatabase from "../../testkit/MigratedDatabase.ts"
import * as Pooler from "../../testkit/Pooler.ts"
import * as PostgresMatrix from "./PostgresMatrix.ts"
import * as TestServer from "./TestServer.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** URL of the server's maintenance database (`postgres`), with credentials, direct to the server. */
    pgAdminUrl: string
    /** Where the code under test connects (`postgres`; a test swaps the database): a pooler's, or `pgAdminUrl`. */
    pgUrl: string
    /** Database holding the migrated schema that each test file clones. */
    pgTemplate: string
    /** The PostgreSQL major the project runs on (the server's, with `DATABASE_URL_TEST`). */
    pgMajor: number
  }
}

/** PgBouncer in front of `adminUrl` when `BOTHY_TEST_POOLER` asks for one; its `postgres` URL and how to stop it. */
const pooler = async (adminUrl: string) => {
  const mode = process.env.BOTHY_TEST_POOLER
  if (mode === undefined || mode === "") return { url: undefined, stop: async () => {} }
  if (mode !== "transaction" && mode !== "session")
    throw new Error(`BOTHY_TEST_POOLER=${mode}: expected transaction or session`)
  const scope = Effect.runSync(Scope.make())
  const started = await Effect.runPromise(Pooler.start(Pooler.targetOf(adminUrl), mode).pipe(Scope.provide(scope)))
  return { url: started.urlOf("postgres"), stop: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

export default async function setup(project: TestProject) {
  const major = project.getProvidedContext().pgMajor
  const own = major === PostgresMatrix.ownMajor
  let adminUrl = own ? (process.env.DATABASE_DIRECT_URL_TEST ?? process.env.DATABASE_URL_TEST) : undefined
  let stopServer = async () => {}
  if (adminUrl === undefined) {
    const started = await TestServer.startOrReject({ packageName: PostgresMatrix.packageName(major) })
    adminUrl = started.adminUrl
    stopServer = started.stop
  }
  const admin = adminUrl
  const pooled = await pooler(admin).catch(async (e) => {
    await stopServer()
    throw e
  })
  const stop = async () => {
    await pooled.stop()
    await stopServer()
  }
  const template = `bothy_template_${process.pid}_${Date.now()}`
  await Effect.runPromise(MigratedDatabase.create(admin, template)).catch(async (e) => {
    await stop()
    throw e
  })
  project.provide("pgAdminUrl", admin)
  project.provide("pgUrl", pooled.url ?? (own ? process.env.DATABASE_URL_TEST : undefined) ?? admin)
  project.provide("pgTemplate", template)

  return async () => {
    await Effect.runPromise(MigratedDatabase.drop(admin, template).pipe(Effect.ignore))
    await stop()
  }
}

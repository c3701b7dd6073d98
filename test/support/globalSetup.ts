/**
 * One PostgreSQL per test project: the embedded server (`TestServer`) of the project's major
 * (`PostgresMatrix`), or, for bothy's own major, the server `DATABASE_URL_TEST` points at. If it
 * cannot start, the run fails with one line saying why. Migrations are applied once to a template
 * database (`MigratedDatabase`); each test file clones it (see `TestDatabase`).
 */
import { Effect } from "effect"
import type { TestProject } from "vitest/node"
import * as MigratedDatabase from "../../testkit/MigratedDatabase.ts"
import * as PostgresMatrix from "./PostgresMatrix.ts"
import * as TestServer from "./TestServer.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** URL of the server's maintenance database (`postgres`), with credentials. */
    pgAdminUrl: string
    /** Database holding the migrated schema that each test file clones. */
    pgTemplate: string
    /** The PostgreSQL major the project runs on (the server's, with `DATABASE_URL_TEST`). */
    pgMajor: number
  }
}

export default async function setup(project: TestProject) {
  const major = project.getProvidedContext().pgMajor
  let adminUrl = major === PostgresMatrix.ownMajor ? process.env.DATABASE_URL_TEST : undefined
  let stop = async () => {}
  if (adminUrl === undefined) {
    const started = await TestServer.startOrReject({ packageName: PostgresMatrix.packageName(major) })
    adminUrl = started.adminUrl
    stop = started.stop
  }
  const template = `bothy_template_${process.pid}_${Date.now()}`
  const admin = adminUrl
  await Effect.runPromise(MigratedDatabase.create(admin, template)).catch(async (e) => {
    await stop()
    throw e
  })
  project.provide("pgAdminUrl", adminUrl)
  project.provide("pgTemplate", template)

  return async () => {
    await Effect.runPromise(MigratedDatabase.drop(admin, template).pipe(Effect.ignore))
    await stop()
  }
}

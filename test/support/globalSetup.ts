/**
 * One PostgreSQL per test run: the embedded server (`TestServer`), or the server
 * `DATABASE_URL_TEST` points at. If it cannot start, the run fails with one line saying why. Migrations are
 * applied once to a template database (`MigratedDatabase`); each test file clones it (see `TestDatabase`).
 */
import { Effect } from "effect"
import type { TestProject } from "vitest/node"
import * as MigratedDatabase from "../../testkit/MigratedDatabase.ts"
import * as TestServer from "./TestServer.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** URL of the server's maintenance database (`postgres`), with credentials. */
    pgAdminUrl: string
    /** Database holding the migrated schema that each test file clones. */
    pgTemplate: string
  }
}

export default async function setup(project: TestProject) {
  let adminUrl = process.env.DATABASE_URL_TEST
  let stop = async () => {}
  if (adminUrl === undefined) {
    const started = await TestServer.startOrReject()
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

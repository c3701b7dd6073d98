/**
 * One PostgreSQL per test run: the embedded server (`TestServer`), or the server
 * `DATABASE_URL_TEST` points at. If it cannot start, the run fails with one line saying why. Migrations are
 * applied once to a template database; each test file clones it (see `TestDatabase`).
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import type { TestProject } from "vitest/node"
import * as Migrations from "../../src/platform/Migrations.ts"
import { withDatabase } from "./DatabaseUrl.ts"
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
  const admin = PgClient.layer({ url: Redacted.make(adminUrl), maxConnections: 1 })
  const migrated = Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`CREATE DATABASE "${template}"`)).pipe(
    Effect.provide(admin),
    Effect.andThen(
      Migrations.run.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(withDatabase(adminUrl, template)) }))),
    ),
  )
  await Effect.runPromise(migrated).catch(async (e) => {
    await stop()
    throw e
  })
  project.provide("pgAdminUrl", adminUrl)
  project.provide("pgTemplate", template)

  return async () => {
    await Effect.runPromise(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql.unsafe(`DROP DATABASE IF EXISTS "${template}" WITH (FORCE)`),
      ).pipe(Effect.provide(admin), Effect.ignore),
    )
    await stop()
  }
}

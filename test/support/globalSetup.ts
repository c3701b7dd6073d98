/**
 * One PostgreSQL per test run: the embedded server on a free port with its data in a temporary
 * folder (fsync off: tests only), or the server `DATABASE_URL_TEST` points at. Migrations are
 * applied once to a template database; each test file clones it (see `TestDatabase`).
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Redacted, Scope } from "effect"
import { SqlClient } from "effect/sql"
import type { TestProject } from "vitest/node"
import * as EmbeddedPostgres from "../../src/EmbeddedPostgres.ts"
import * as Migrations from "../../src/Migrations.ts"
import { withDatabase } from "./DatabaseUrl.ts"

declare module "vitest" {
  export interface ProvidedContext {
    /** URL of the server's maintenance database (`postgres`), with credentials. */
    pgAdminUrl: string
    /** Database holding the migrated schema that each test file clones. */
    pgTemplate: string
  }
}

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(address)))
    })
  })

export default async function setup(project: TestProject) {
  const scope = Effect.runSync(Scope.make())
  const dir = mkdtempSync(join(tmpdir(), "bothy-test-"))
  chmodSync(dir, 0o755) // as root the server runs as "postgres", which must enter this folder
  let adminUrl = process.env.DATABASE_URL_TEST
  if (adminUrl === undefined) {
    const port = await freePort()
    const server = await Effect.runPromise(
      EmbeddedPostgres.start({
        dataDir: join(dir, "pg"),
        passwordFile: join(dir, "password"),
        port,
        ephemeral: true,
        settings: { fsync: "off", synchronous_commit: "off", full_page_writes: "off", max_connections: "400" },
      }).pipe(Scope.provide(scope)),
    )
    adminUrl = `postgres://${server.user}:${encodeURIComponent(Redacted.value(server.password))}@${server.host}:${server.port}/postgres`
  }
  const template = `bothy_template_${process.pid}_${Date.now()}`
  const admin = PgClient.layer({ url: Redacted.make(adminUrl), maxConnections: 1 })
  await Effect.runPromise(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`CREATE DATABASE "${template}"`)).pipe(
      Effect.provide(admin),
    ),
  )
  await Effect.runPromise(
    Migrations.run.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(withDatabase(adminUrl, template)) }))),
  )
  project.provide("pgAdminUrl", adminUrl)
  project.provide("pgTemplate", template)

  return async () => {
    await Effect.runPromise(
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql.unsafe(`DROP DATABASE IF EXISTS "${template}" WITH (FORCE)`),
      ).pipe(Effect.provide(admin), Effect.ignore),
    )
    await Effect.runPromise(Scope.close(scope, Exit.void))
    rmSync(dir, { recursive: true, force: true })
  }
}

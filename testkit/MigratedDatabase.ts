/**
 * A database made on a server and migrated as bothy migrates its own (`Migrations.run`): the test
 * run's template, which every test file clones, and a chaos run's database. Keeps true: the
 * database is created empty and holds bothy's schema before its URL is handed out.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import * as Migrations from "../src/platform/Migrations.ts"
import { withDatabase } from "./DatabaseUrl.ts"

/** Runs one statement on the server's maintenance database (`adminUrl`), on a connection of its own. */
export const adminStatement = (adminUrl: string, statement: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(statement)).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(adminUrl), maxConnections: 1 })),
  )

/** Creates the database `name` and migrates it; its URL. */
export const create = (adminUrl: string, name: string) =>
  Effect.gen(function* () {
    yield* adminStatement(adminUrl, `CREATE DATABASE "${name}"`)
    const url = withDatabase(adminUrl, name)
    yield* Migrations.run.pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url) })))
    return url
  })

/** Drops the database `name`, cutting off whoever is still connected. */
export const drop = (adminUrl: string, name: string) =>
  adminStatement(adminUrl, `DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)

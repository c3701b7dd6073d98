/**
 * When the embedded server counts as started: once it accepts connections, whatever its log
 * settings. With `logging_collector` on, its "ready to accept connections" line goes to a file, not
 * to the stderr bothy watches; the status line of `postmaster.pid` says it all the same.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"

describe("embedded server readiness", () => {
  it.live(
    "EmbeddedReadyWithLogsElsewhere: with logging_collector on (no ready line on stderr) the server starts and answers",
    () =>
      Effect.gen(function* () {
        const server = yield* EmbeddedServer.start({
          prefix: "bothy-logs-elsewhere-",
          openFolder: true,
          quiet: true,
          settings: { fsync: "off", logging_collector: "on" },
        })
        const [row] = yield* Effect.gen(function* () {
          const sql = yield* SqlClient.SqlClient
          return yield* sql<{ collector: string }>`SELECT current_setting('logging_collector') AS collector`
        }).pipe(
          Effect.provide(
            Layer.fresh(
              PgClient.layer({
                host: server.host,
                port: server.port,
                username: server.user,
                password: server.password,
                database: "postgres",
              }),
            ),
          ),
        )
        assert.strictEqual(row?.collector, "on")
      }).pipe(Effect.scoped),
    120_000,
  )
})

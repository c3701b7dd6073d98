/**
 * The PostgreSQL of a chaos run, owned by the harness so that it can restart it under the workers:
 * the kit's embedded server (`testkit/EmbeddedServer`, bothy's own `EmbeddedPostgres.start`) on a
 * free port, its data kept in the run's folder across restarts (fsync off: the harness stops it
 * cleanly, and this is a test of behaviour, not of durability), removed at the end.
 *
 * `restart` stops the server as bothy stops its own (SIGINT, a fast shutdown: every connection is
 * cut), waits `downMillis`, and starts it again on the same port and data.
 */
import { Effect } from "effect"
import * as EmbeddedServer from "../testkit/EmbeddedServer.ts"

/** Server settings of the run, part of its conditions. */
export const settings = {
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  max_connections: "300",
} as const

export const database = "bothy"

export const start = EmbeddedServer.start({ prefix: "bothy-chaos-", settings, openFolder: true, quiet: true }).pipe(
  Effect.orDie,
  Effect.map((server) => ({
    adminUrl: server.adminUrl,
    url: server.urlOf(database),
    port: server.port,
    restart: server.restart,
  })),
)

export type ChaosServer = Effect.Success<typeof start>

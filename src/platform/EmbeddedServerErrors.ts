/**
 * Why the embedded PostgreSQL did not start, or stopped on its own: each error names the data
 * folder or the port, and what to do about it.
 */
import { Schema } from "effect"
import type * as EmbeddedBinaries from "./EmbeddedBinaries.ts"
import type * as EmbeddedDataFolder from "./EmbeddedDataFolder.ts"
import type * as EmbeddedServerUser from "./EmbeddedServerUser.ts"

export class EmbeddedPostgresError extends Schema.TaggedError<EmbeddedPostgresError>()("EmbeddedPostgresError", {
  step: Schema.Literals(["initialise", "start"]),
  dataDir: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `embedded PostgreSQL failed to ${this.step} (data in ${this.dataDir}): ${this.detail}`
  }
}

export class EmbeddedPortInUse extends Schema.TaggedError<EmbeddedPortInUse>()("EmbeddedPortInUse", {
  port: Schema.Number,
  /** The setting that chose the port, when there is one. */
  variable: Schema.optional(Schema.String),
}) {
  override get message() {
    const fix = this.variable === undefined ? "choose a free port" : `set ${this.variable} to a free port`
    return `embedded PostgreSQL cannot listen on 127.0.0.1:${this.port}: another process uses that port; ${fix}`
  }
}

export class EmbeddedServerExited extends Schema.TaggedError<EmbeddedServerExited>()("EmbeddedServerExited", {
  pid: Schema.Number,
  dataDir: Schema.String,
  /** How it ended, e.g. `killed by SIGKILL`. */
  how: Schema.String,
  lastLog: Schema.String,
}) {
  override get message() {
    const log = this.lastLog.length > 0 ? `; its last log lines: ${this.lastLog}` : ""
    return `the embedded PostgreSQL (pid ${this.pid}, data in ${this.dataDir}) exited on its own (${this.how})${log}`
  }
}

export type StartError =
  | EmbeddedPostgresError
  | EmbeddedPortInUse
  | EmbeddedBinaries.EmbeddedBinariesUnusable
  | EmbeddedDataFolder.EmbeddedDataUnreachable
  | EmbeddedServerUser.ServerUserUnavailable

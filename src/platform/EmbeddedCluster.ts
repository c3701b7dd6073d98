/**
 * Creating the embedded server's cluster: `initdb` into the data folder, with the superuser's
 * password from its file (made with a random one on first start, readable by bothy alone).
 *
 * A failed or interrupted `initdb` leaves no half-made cluster behind (the next start would take it
 * for one), and a folder that holds files but no cluster is never initialised over.
 */
import { randomBytes } from "node:crypto"
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { Effect, Exit } from "effect"
import type * as EmbeddedBinaries from "./EmbeddedBinaries.ts"
import * as EmbeddedProcess from "./EmbeddedProcess.ts"
import { EmbeddedPostgresError } from "./EmbeddedServerErrors.ts"
import type * as EmbeddedServerUser from "./EmbeddedServerUser.ts"

export const superuser = "postgres"

/** Whether `dataDir` holds a cluster already. */
export const exists = (dataDir: string) => existsSync(join(dataDir, "PG_VERSION"))

export const readOrCreatePassword = (file: string) => {
  if (existsSync(file)) return readFileSync(file, "utf8").trim()
  const password = randomBytes(18).toString("base64url")
  mkdirSync(dirname(file), { recursive: true })
  writeFileSync(file, `${password}\n`, { mode: 0o600 })
  return password
}

/**
 * Runs `initdb` into `dataDir`, which must be missing or empty. A failed or interrupted run leaves
 * no half-made cluster behind (the next start would take it for one): the folder is emptied again,
 * or removed if this run created it.
 */
export const initialise = (
  binaries: EmbeddedBinaries.Binaries,
  dataDir: string,
  user: EmbeddedServerUser.ServerUser,
  password: string,
) => {
  const fail = (detail: string) => new EmbeddedPostgresError({ step: "initialise", dataDir, detail })
  const passwordFile = `${dataDir}.pwfile`
  const undo = (created: boolean) =>
    Effect.sync(() => {
      if (created) rmSync(dataDir, { recursive: true, force: true })
      else for (const entry of readdirSync(dataDir)) rmSync(join(dataDir, entry), { recursive: true, force: true })
    })
  const run = Effect.gen(function* () {
    const initdb = yield* Effect.acquireRelease(
      Effect.sync(() =>
        EmbeddedProcess.start(
          binaries.initdb,
          [
            `--pgdata=${dataDir}`,
            `--username=${superuser}`,
            `--pwfile=${passwordFile}`,
            "--auth=scram-sha-256",
            // UTF-8 whatever the machine's locale; neither the C locale nor the builtin provider
            // needs an OS locale.
            "--encoding=UTF8",
            "--locale=C",
            // The builtin provider came in 17; an older major (the tests' matrix) keeps libc's C.
            ...(binaries.major >= 17 ? ["--locale-provider=builtin", "--builtin-locale=C.UTF-8"] : []),
            "--lc-messages=C",
          ],
          user,
          "close",
        ),
      ),
      // initdb runs PostgreSQL in bootstrap mode as its own child: stop the whole group.
      (w) =>
        Effect.promise(() => {
          if (!w.hasEnded()) EmbeddedProcess.killGroup(w.child.pid)
          return w.ended
        }),
    )
    const end = yield* Effect.promise(() => initdb.ended)
    if (end.code !== 0) return yield* fail(`initdb: ${EmbeddedProcess.describeEnd(end)}: ${initdb.recentLog()}`)
  }).pipe(Effect.scoped, Effect.ensuring(Effect.sync(() => rmSync(passwordFile, { force: true }))))

  return Effect.gen(function* () {
    if (existsSync(dataDir) && readdirSync(dataDir).length > 0) {
      return yield* fail("the folder holds files but no PostgreSQL cluster; empty it or choose another BOTHY_HOME")
    }
    const created = yield* Effect.try({
      try: () => {
        const made = mkdirSync(dataDir, { recursive: true, mode: 0o700 }) !== undefined
        writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 })
        if (user !== undefined) {
          chownSync(dataDir, user.uid, user.gid)
          chownSync(passwordFile, user.uid, user.gid)
        }
        return made
      },
      catch: (e) => fail(String(e)),
    })
    yield* run.pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : undo(created))))
  })
}

/**
 * What `bothy worker` prints when it cannot reach its database at start: one line on stderr that
 * names the variable to fix and the cause, exit 1, and never a password.
 */
import { randomBytes } from "node:crypto"
import { existsSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { inject } from "vitest"
import { withDatabase } from "../../testkit/DatabaseUrl.ts"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"
import * as EmbeddedWorker from "../support/EmbeddedWorker.ts"
import * as NodeProcess from "../support/NodeProcess.ts"

const oneLine = (out: NodeProcess.Finished) => {
  assert.strictEqual(out.code, 1, out.stderr)
  const lines = EmbeddedWorker.lines(out.stderr)
  assert.strictEqual(lines.length, 1, out.stderr)
  return lines[0]!
}

/** A port some other process listens on. */
const takenPort = Effect.acquireRelease(
  Effect.callback<{ readonly port: number; readonly close: () => void }>((resume) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address ? address.port : 0
      resume(Effect.succeed({ port, close: () => server.close() }))
    })
  }),
  (taken) => Effect.sync(taken.close),
)

const worker = (env: Record<string, string>) =>
  NodeProcess.run(NodeProcess.bothy, ["worker"], {
    BOTHY_WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"),
    ...env,
  })

describe("start errors", () => {
  it.live("StartErrorsNameTheVariable: a taken embedded port names BOTHY_EMBEDDED_PORT, before initdb runs", () =>
    Effect.gen(function* () {
      const home = yield* EmbeddedWorker.home
      const { port } = yield* takenPort
      const out = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
        BOTHY_HOME: home,
        BOTHY_EMBEDDED_PORT: String(port),
      })
      const line = oneLine(out)
      assert.match(line, new RegExp(`127\\.0\\.0\\.1:${port}`))
      assert.match(line, /another process uses that port; set BOTHY_EMBEDDED_PORT to a free port/)
      assert.notMatch(out.stdout, /initdb|Address already in use/)
      assert.isFalse(existsSync(join(home, "pg")), "no cluster was created")
    }).pipe(Effect.scoped),
  )

  it.live(
    "StartErrorsNameTheVariable: DATABASE_URL at a port nothing listens on names DATABASE_URL and the refusal",
    () =>
      Effect.gen(function* () {
        const port = yield* EmbeddedServer.freePort
        const secret = `s3cret-${randomBytes(6).toString("hex")}`
        const out = yield* worker({ DATABASE_URL: `postgres://bothy:${secret}@127.0.0.1:${port}/bothy` })
        const line = oneLine(out)
        assert.include(line, `cannot connect to postgres://bothy:***@127.0.0.1:${port}/bothy (DATABASE_URL)`)
        assert.match(line, /ECONNREFUSED.*nothing listens at that host and port/)
        assert.notInclude(`${out.stdout}${out.stderr}`, secret)
      }),
  )

  it.live("StartErrorsNameTheVariable: a wrong password in DATABASE_URL names it, the user and the refusal", () =>
    Effect.gen(function* () {
      const url = new URL(inject("pgAdminUrl"))
      const real = decodeURIComponent(url.password)
      url.password = `wrong-${randomBytes(6).toString("hex")}`
      const out = yield* worker({ DATABASE_URL: url.toString() })
      const line = oneLine(out)
      assert.match(line, /\(DATABASE_URL\): password authentication failed for user "postgres"$/)
      assert.include(line, "postgres://postgres:***@")
      for (const secret of [url.password, real]) assert.notInclude(`${out.stdout}${out.stderr}`, secret)
    }),
  )

  it.live("StartErrorsNameTheVariable: an unknown database in DATABASE_URL names it", () =>
    Effect.gen(function* () {
      const admin = inject("pgAdminUrl")
      const out = yield* worker({ DATABASE_URL: withDatabase(admin, "no_such_database") })
      const line = oneLine(out)
      assert.match(line, /\/no_such_database \(DATABASE_URL\): database "no_such_database" does not exist$/)
      assert.notInclude(`${out.stdout}${out.stderr}`, decodeURIComponent(new URL(admin).password))
    }),
  )
})

/**
 * TLS to an external server as an operator's `DATABASE_URL` asks for it (`DatabaseTls`): a real
 * server with a certificate from a CA this test makes, reached through `Database.layer`, the layer
 * `bothy worker` starts with.
 */
import { assert, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Database from "../../src/platform/Database.ts"
import * as EmbeddedServerUser from "../../src/platform/EmbeddedServerUser.ts"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"
import * as TestCa from "../support/TestCa.ts"

class TlsServer extends Context.Service<
  TlsServer,
  { readonly url: (query: string) => string; readonly ca: string; readonly otherCa: string }
>()("test/TlsServer") {}

const tlsServer = Layer.effect(
  TlsServer,
  Effect.gen(function* () {
    const dir = yield* EmbeddedServer.tempFolder("bothy-tls-", { open: true })
    const ca = TestCa.makeCa(dir, "test-ca")
    const other = TestCa.makeCa(dir, "other-ca")
    const cert = TestCa.makeServerCert(dir, ca, yield* EmbeddedServerUser.resolve)
    const server = yield* EmbeddedServer.start({
      prefix: "bothy-tls-pg-",
      openFolder: true,
      quiet: true,
      settings: { fsync: "off", ssl: "on", ssl_cert_file: cert.cert, ssl_key_file: cert.key },
    })
    return TlsServer.of({
      url: (query) =>
        `postgres://${server.user}:${encodeURIComponent(Redacted.value(server.password))}@127.0.0.1:${server.port}/postgres?${query}`,
      ca: ca.cert,
      otherCa: other.cert,
    })
  }),
).pipe(Layer.orDie)

/** `Database.layer` as `bothy worker` builds it, with `DATABASE_URL` set to `url`. */
const databaseAt = (url: string) =>
  Database.layer.pipe(Layer.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env: { DATABASE_URL: url } }))))

/** Connects, migrates, appends one event and reads it back; whether the session is encrypted. */
const appendAndRead = (url: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const log = yield* EventLog
    const appended = yield* log.append([{ space: "s", type: "tls.checked", actor: "a", payload: { over: "tls" } }])
    assert(appended._tag === "Sequenced", "the counter mode numbers at once")
    const read = yield* log.read(appended.lastSeq - 1n, 10)
    const [session] = yield* sql<{ ssl: boolean }>`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`
    return { read, encrypted: session?.ssl === true }
  }).pipe(
    Effect.provide(EventLog.layer.pipe(Layer.provideMerge(Database.migrate), Layer.provideMerge(databaseAt(url)))),
  )

layer(tlsServer, { excludeTestServices: true, timeout: 120_000 })("Database over TLS", (it) => {
  it.effect(
    "TlsVerifyFull: sslmode=verify-full with the CA in sslrootcert connects, appends and reads, encrypted",
    () =>
      Effect.gen(function* () {
        const server = yield* TlsServer
        const { read, encrypted } = yield* appendAndRead(server.url(`sslmode=verify-full&sslrootcert=${server.ca}`))
        assert.isTrue(encrypted, "the session is encrypted")
        assert.deepStrictEqual(
          read.map((e) => e.payload),
          [{ over: "tls" }],
        )
      }),
  )

  it.effect("TlsRequire: sslmode=require encrypts without checking the certificate, as libpq does", () =>
    Effect.gen(function* () {
      const server = yield* TlsServer
      const { read, encrypted } = yield* appendAndRead(server.url("sslmode=require"))
      assert.isTrue(encrypted, "the session is encrypted")
      assert.isAtLeast(read.length, 1)
    }),
  )

  it.effect("TlsWrongCaRefused: a certificate from another CA stops the start with one typed line", () =>
    Effect.gen(function* () {
      const server = yield* TlsServer
      const error = yield* Layer.build(
        databaseAt(server.url(`sslmode=verify-full&sslrootcert=${server.otherCa}`)),
      ).pipe(Effect.scoped, Effect.flip)
      assert.strictEqual(error._tag, "DatabaseUnavailable")
      assert.include(error.message, "(DATABASE_URL): TLS refused (")
      assert.include(error.message, "the server's certificate is not signed by a CA bothy trusts")
      assert.notInclude(error.message, "Node.js")
      assert.notInclude(error.message, "\n")
      assert.notInclude(error.message, "Query failed")
    }),
  )

  it.effect("TlsFileUnreadable: an sslrootcert that cannot be read stops the start naming the parameter and path", () =>
    Effect.gen(function* () {
      const server = yield* TlsServer
      const missing = `${server.ca}.missing`
      const error = yield* Layer.build(databaseAt(server.url(`sslmode=verify-full&sslrootcert=${missing}`))).pipe(
        Effect.scoped,
        Effect.flip,
      )
      assert(error._tag === "DatabaseTlsFileUnreadable", error.message)
      assert.include(error.message, `DATABASE_URL: sslrootcert=${missing} cannot be read`)
    }),
  )
})

/**
 * Several hosts in `DATABASE_URL`, read as libpq reads them; the rest of the URL kept for each host,
 * without `target_session_attrs` (the driver ignores it; bothy looks for the primary itself).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import * as DatabaseHosts from "../../src/platform/DatabaseHosts.ts"

const hostsOf = (url: string) => Effect.map(DatabaseHosts.parse(url), Option.getOrUndefined)

describe("DatabaseHosts", () => {
  it.effect("MultiHostUrl: each host with its port (5432 when none), and a one-host URL per host", () =>
    Effect.gen(function* () {
      const hosts = yield* hostsOf(
        "postgres://bothy:s%40cret@db1:5433,db2,[::1]:5434/app?sslmode=require&target_session_attrs=read-write&application_name=x",
      )
      assert.deepStrictEqual(hosts?.hosts, [
        { host: "db1", port: 5433 },
        { host: "db2", port: 5432 },
        { host: "::1", port: 5434 },
      ])
      assert.deepStrictEqual(
        hosts?.hosts.map((h) => Redacted.value(hosts.urlOf(h))),
        [
          "postgres://bothy:s%40cret@db1:5433/app?sslmode=require&application_name=x",
          "postgres://bothy:s%40cret@db2:5432/app?sslmode=require&application_name=x",
          "postgres://bothy:s%40cret@[::1]:5434/app?sslmode=require&application_name=x",
        ],
      )
      const last = yield* hostsOf("postgresql://u@a:1,b:2/d?target_session_attrs=primary")
      assert.strictEqual(Redacted.value(last!.urlOf(last!.hosts[1]!)), "postgresql://u@b:2/d")
    }),
  )

  it.effect("SingleHostUrl: one host is the driver's own case", () =>
    Effect.gen(function* () {
      assert.isUndefined(yield* hostsOf("postgres://u:p@db:5432/app?target_session_attrs=read-write"))
    }),
  )

  it.effect("MultiHostUrlRefused: a standby asked for, or a host that does not read, stops with one line", () =>
    Effect.gen(function* () {
      const standby = yield* Effect.flip(DatabaseHosts.parse("postgres://u@a,b/d?target_session_attrs=standby"))
      assert.strictEqual(
        standby.message,
        "invalid configuration: DATABASE_URL asks for target_session_attrs=standby; bothy writes, so it always looks for the primary (read-write or primary)",
      )
      const bad = yield* Effect.flip(DatabaseHosts.parse("postgres://u@a:x,b/d"))
      assert.strictEqual(bad.message, 'invalid configuration: DATABASE_URL names a host it cannot read: "a:x"')
    }),
  )
})

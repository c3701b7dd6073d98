/**
 * What every `Permissions` must answer, run against each implementation (the grants table on the
 * real database, the in-memory layer): granted allows, anything else denies (never granted,
 * revoked, another action, another space), one answer per check in the order asked, none for no
 * checks. `allowed`, `allowedEach` and, where the implementation offers it, `inSql` (evaluated in
 * one statement over all the checks, as the drainer does) must all give the expected answers.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, type Layer, Option } from "effect"
import { SqlClient } from "effect/sql"
import {
  type PermissionCheck,
  Permissions,
  type PermissionsInSql,
  type PermissionsShape,
} from "../../src/authz/Permissions.ts"

/** How the suite changes the rights behind the layer under test. */
export interface Rights<R> {
  readonly grant: (principal: string, action: string, spaceId: string) => Effect.Effect<void, unknown, R>
  readonly revoke: (principal: string, action: string, spaceId: string) => Effect.Effect<void, unknown, R>
}

/** The checks' answers from one statement that evaluates `inSql` per row, in the order asked. */
const answersInSql = (sql: SqlClient.SqlClient, inSql: PermissionsInSql, checks: ReadonlyArray<PermissionCheck>) =>
  Effect.gen(function* () {
    const columns = { principal: sql.literal("c.principal"), spaceId: sql.literal("c.space_id") }
    const actions = [...new Set(checks.map((c) => c.action))]
    const rule =
      actions.length === 0
        ? sql.literal("false")
        : sql`CASE c.action ${sql.join(" ", false)(actions.map((a) => sql`WHEN ${a} THEN ${inSql(columns, a)}`))} END`
    const rows = yield* sql<{ ok: boolean }>`
      SELECT ${rule} AS ok
      FROM unnest(${checks.map((c) => c.principal)}::text[], ${checks.map((c) => c.action)}::text[],
                  ${checks.map((c) => c.spaceId)}::text[]) WITH ORDINALITY AS c(principal, action, space_id, n)
      ORDER BY c.n`
    return rows.map((r) => r.ok)
  })

/** Asserts every path of `permissions` answers `checks` with `expected`. */
const expectAnswers = (
  permissions: PermissionsShape,
  checks: ReadonlyArray<PermissionCheck>,
  expected: ReadonlyArray<boolean>,
) =>
  Effect.gen(function* () {
    assert.deepStrictEqual(yield* permissions.allowedEach(checks), expected, "allowedEach")
    const one = yield* Effect.forEach(checks, (c) => permissions.allowed(c.principal, c.action, c.spaceId))
    assert.deepStrictEqual(one, expected, "allowed")
    if (permissions.inSql !== undefined) {
      const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
      if (Option.isNone(sql)) return assert.fail("an implementation that offers inSql runs where an SqlClient is")
      assert.deepStrictEqual(yield* answersInSql(sql.value, permissions.inSql, checks), expected, "inSql")
    }
  })

let principals = 0
/** A principal no other test of the suite uses, so the tests share a layer without seeing each other. */
const freshPrincipal = () => `principal-${++principals}-${Math.random().toString(36).slice(2)}`

const read = "doc.read"
const write = "doc.write"

/** Runs the conformance suite against `live`, changing its rights with `rights`. */
export const suite = <R, E>(name: string, live: Layer.Layer<Permissions | R, E>, rights: Rights<R>) =>
  layer(live, { excludeTestServices: true })(`PermissionsConformance (${name})`, (it) => {
    it.effect(`PermissionsConformance: ${name}: a granted right is allowed`, () =>
      Effect.gen(function* () {
        const p = freshPrincipal()
        yield* rights.grant(p, read, "space-a")
        yield* expectAnswers(yield* Permissions, [{ principal: p, action: read, spaceId: "space-a" }], [true])
      }),
    )

    it.effect(`PermissionsConformance: ${name}: a right never granted is denied`, () =>
      Effect.gen(function* () {
        const p = freshPrincipal()
        yield* expectAnswers(yield* Permissions, [{ principal: p, action: read, spaceId: "space-a" }], [false])
      }),
    )

    it.effect(`PermissionsConformance: ${name}: a revoked right is denied; granting twice is one grant`, () =>
      Effect.gen(function* () {
        const p = freshPrincipal()
        const check = [{ principal: p, action: read, spaceId: "space-a" }]
        yield* rights.grant(p, read, "space-a")
        yield* rights.grant(p, read, "space-a")
        yield* expectAnswers(yield* Permissions, check, [true])
        yield* rights.revoke(p, read, "space-a")
        yield* expectAnswers(yield* Permissions, check, [false])
        yield* rights.revoke(p, read, "space-a")
        yield* expectAnswers(yield* Permissions, check, [false])
        yield* rights.grant(p, read, "space-a")
        yield* expectAnswers(yield* Permissions, check, [true])
      }),
    )

    it.effect(`PermissionsConformance: ${name}: a right to another action is denied`, () =>
      Effect.gen(function* () {
        const p = freshPrincipal()
        yield* rights.grant(p, read, "space-a")
        yield* expectAnswers(
          yield* Permissions,
          [
            { principal: p, action: write, spaceId: "space-a" },
            { principal: p, action: "DOC.READ", spaceId: "space-a" },
          ],
          [false, false],
        )
      }),
    )

    it.effect(`PermissionsConformance: ${name}: a right in another space, or another principal's, is denied`, () =>
      Effect.gen(function* () {
        const p = freshPrincipal()
        const other = freshPrincipal()
        yield* rights.grant(p, read, "space-a")
        yield* expectAnswers(
          yield* Permissions,
          [
            { principal: p, action: read, spaceId: "space-b" },
            { principal: p, action: read, spaceId: "space-a " },
            { principal: other, action: read, spaceId: "space-a" },
          ],
          [false, false, false],
        )
      }),
    )

    it.effect(`PermissionsConformance: ${name}: many checks at once get one answer each, in the order asked`, () =>
      Effect.gen(function* () {
        const p = freshPrincipal()
        const q = freshPrincipal()
        yield* rights.grant(p, read, "s1")
        yield* rights.grant(p, write, "s2")
        yield* rights.grant(q, read, "s2")
        yield* rights.grant(p, read, "s3")
        yield* rights.revoke(p, read, "s3")
        const checks: Array<PermissionCheck> = []
        const expected: Array<boolean> = []
        for (let i = 0; i < 40; i++) {
          const [principal, action, spaceId, ok] = (
            [
              [p, read, "s1", true],
              [p, read, "s2", false],
              [p, write, "s2", true],
              [q, read, "s2", true],
              [q, read, "s1", false],
              [p, read, "s3", false],
              [p, read, "s1", true],
            ] as const
          )[(i * 5) % 7]!
          checks.push({ principal, action, spaceId })
          expected.push(ok)
        }
        yield* expectAnswers(yield* Permissions, checks, expected)
      }),
    )

    it.effect(`PermissionsConformance: ${name}: no checks get no answers`, () =>
      Effect.gen(function* () {
        yield* expectAnswers(yield* Permissions, [], [])
      }),
    )
  })

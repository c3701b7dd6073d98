import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { Permissions, webhookDeliver } from "../../src/authz/Permissions.ts"
import * as PermissionsMemory from "../../src/authz/PermissionsMemory.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import { suite } from "./PermissionsConformance.ts"

const Grants = PermissionGrants.layer.pipe(Layer.provideMerge(TestDatabase.layer()))

suite("grants table", Grants, { grant: PermissionGrants.grant, revoke: PermissionGrants.revoke })

suite("in memory", PermissionsMemory.layer, { grant: PermissionsMemory.grant, revoke: PermissionsMemory.revoke })

layer(Grants, { excludeTestServices: true })("PermissionGrants", (it) => {
  it.effect(
    "PermissionsUnavailable: a grants table that cannot answer fails with the store, the checks and the cause",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const permissions = yield* Permissions
        yield* sql`ALTER TABLE permission_grants RENAME TO permission_grants_away`
        const checks = [
          { principal: "owner-u", action: webhookDeliver, spaceId: "space-u" },
          { principal: "owner-v", action: webhookDeliver, spaceId: "space-v" },
        ]
        const each = yield* Effect.flip(permissions.allowedEach(checks))
        const one = yield* Effect.flip(permissions.allowed("owner-w", webhookDeliver, "space-w"))
        yield* sql`ALTER TABLE permission_grants_away RENAME TO permission_grants`
        assert.strictEqual(each._tag, "PermissionsUnavailable")
        assert.strictEqual(each.source, "permission_grants")
        assert.strictEqual(each.checks, 2)
        assert.deepStrictEqual(each.first, checks[0])
        assert.strictEqual((each.cause as { _tag?: string })._tag, "SqlError")
        assert.match(
          each.message,
          /^cannot check 2 permission\(s\) with permission_grants \(first: webhook_out\.deliver of owner-u on space-u\): /,
        )
        assert.match(each.message, /relation "permission_grants" does not exist$/)
        assert.strictEqual(one.checks, 1)
        assert.deepStrictEqual(one.first, { principal: "owner-w", action: webhookDeliver, spaceId: "space-w" })
        assert.isFalse(
          yield* permissions.allowed("owner-w", webhookDeliver, "space-w"),
          "answers again once the table is back",
        )
      }),
  )
})

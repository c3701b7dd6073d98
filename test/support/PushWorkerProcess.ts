/**
 * What the tests that kill a `bothy worker` mid-push share: a database cloned for processes, a
 * push service that checks the VAPID key the worker signs with, the test's own layers on that
 * database, the worker's environment with push on, and an event appended there.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import * as PermissionGrants from "../../src/authz/PermissionGrants.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as TestDatabase from "./TestDatabase.ts"
import * as TestPush from "./TestPush.ts"
import * as WorkerProcess from "./WorkerProcess.ts"

export const world = (name: string) =>
  Effect.gen(function* () {
    const { url } = yield* TestDatabase.cloneForProcesses(name)
    const vapid = PushVapid.generate()
    const service = yield* PushService.start({ applicationServerKey: vapid.publicKey })
    const host = Layer.mergeAll(EventLog.layer, PermissionGrants.layer).pipe(
      Layer.provideMerge(PushConfig.layerWith(TestPush.settings())),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })),
    )
    const env = { DATABASE_URL: url, ...WorkerProcess.deliveringEnv(vapid) }
    return { service, host, env }
  })

/** One event in space `team` by `bob`; its head (epoch and seq). */
export const appendOne = Effect.gen(function* () {
  const log = yield* EventLog
  yield* log.append([{ space: "team", type: "card.created", actor: "bob", payload: { summary: "hi" } }])
  return yield* log.head
})

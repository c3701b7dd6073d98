/**
 * One `bothy worker` process for a test file, on the file's database with the test's sealing key,
 * with push on (a fresh VAPID pair and a local push service), so that push's parts and metrics are
 * built too; for the tests that observe a whole worker from outside (its metrics endpoint).
 */
import { Context, Layer } from "effect"
import { PushConfig } from "../../src/push/PushConfig.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as PushService from "../../testkit/PushService.ts"
import * as TestPush from "./TestPush.ts"
import * as TestWebhooks from "./TestWebhooks.ts"
import * as WorkerProcess from "./WorkerProcess.ts"

export class RunningWorker extends Context.Service<RunningWorker, WorkerProcess.Worker>()("test/RunningWorker") {}
export class LocalPushService extends Context.Service<LocalPushService, PushService.PushService>()(
  "test/LocalPushService",
) {}

/** The worker, its push service and the test's own layers (webhooks, push config) on the same database. */
export const layer = () => {
  const key = WorkerProcess.rawKey()
  const vapid = PushVapid.generate()
  return Layer.effect(
    RunningWorker,
    WorkerProcess.start(key, {
      BOTHY_PUSH_VAPID_PUBLIC_KEY: vapid.publicKey,
      BOTHY_PUSH_VAPID_PRIVATE_KEY: vapid.privateKey,
      BOTHY_PUSH_SUBJECT: TestPush.subject,
      BOTHY_PUSH_HOSTS: "*",
    }),
  ).pipe(
    Layer.provideMerge(Layer.effect(LocalPushService, PushService.start({ applicationServerKey: vapid.publicKey }))),
    Layer.provideMerge(
      Layer.mergeAll(TestWebhooks.layer({ secretKey: key }), PushConfig.layerWith(TestPush.settings())),
    ),
  )
}

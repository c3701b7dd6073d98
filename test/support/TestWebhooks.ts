/**
 * The webhook services on a fresh test database, with a random sealing key and http to loopback
 * allowed (the receivers are local); and the `webhooks` consumer's round, run by hand.
 */
import { randomBytes } from "node:crypto"
import type { PgClient } from "@effect/sql-pg"
import { type Duration, Effect, Layer, Redacted } from "effect"
import * as Consumer from "../../src/Consumer.ts"
import { EventLog } from "../../src/EventLog.ts"
import { Jobs } from "../../src/Jobs.ts"
import { NotificationStream } from "../../src/NotificationStream.ts"
import * as PermissionGrants from "../../src/PermissionGrants.ts"
import * as SecretBox from "../../src/SecretBox.ts"
import { WebhookConfig } from "../../src/WebhookConfig.ts"
import { Webhooks } from "../../src/Webhooks.ts"
import * as WebhooksConsumer from "../../src/WebhooksConsumer.ts"
import * as TestDatabase from "./TestDatabase.ts"

export const secretKey = () => Effect.runSync(SecretBox.parseKey(Redacted.make(randomBytes(32).toString("base64"))))

export const layer = (
  options: {
    readonly retrySteps?: ReadonlyArray<Duration.Duration>
    readonly pool?: Partial<PgClient.PgPoolConfig>
  } = {},
) =>
  Layer.mergeAll(Webhooks.layer, PermissionGrants.layer, EventLog.layer, Jobs.layer, NotificationStream.layer()).pipe(
    Layer.provideMerge(
      WebhookConfig.layerWith({
        secretKey: secretKey(),
        policy: { allowHttpLoopback: true, allowCidrs: [], allowHosts: [] },
        ...(options.retrySteps === undefined ? {} : { retrySteps: options.retrySteps }),
      }),
    ),
    Layer.provideMerge(TestDatabase.layer(options.pool)),
  )

/** One round of the `webhooks` consumer, run by hand so a test can act between round and job. */
export const round = (batchSize = 10_000) =>
  Effect.flatMap(Consumer.makeRound(WebhooksConsumer.roundOptions({ batchSize })), (r) => r)

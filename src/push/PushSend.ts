/**
 * One push message of a batch's attempt, sent to one registration, and what its answer makes of it
 * in the attempt's `Ledger`. It keeps true: each request ends in exactly one ledger entry for its
 * registration (settled, failed, throttled or dead), and its TTL header is what is left of the TTL
 * since the event's commit, so a retried message never outlives the first one's deadline.
 */
import { Clock, Duration, Effect, Metric } from "effect"
import { SqlClient } from "effect/sql"
import * as OutboundSender from "../outbound/OutboundSender.ts"
import * as ThrottledWarnings from "../platform/ThrottledWarnings.ts"
import type { Ledger } from "./PushBatch.ts"
import { defaults, PushConfig } from "./PushConfig.ts"
import * as PushConnections from "./PushConnections.ts"
import * as PushEncryption from "./PushEncryption.ts"
import * as PushEnvelope from "./PushEnvelope.ts"
import type { BatchArgs } from "./PushJob.ts"
import * as PushMessageKey from "./PushMessageKey.ts"
import * as PushMetrics from "./PushMetrics.ts"
import * as PushOutcome from "./PushOutcome.ts"
import type * as PushProgress from "./PushProgress.ts"
import * as PushRegistrations from "./PushRegistrations.ts"
import type * as PushRequest from "./PushRequest.ts"
import type { Target, TargetEvent } from "./PushTargets.ts"
import * as PushVapid from "./PushVapid.ts"

/**
 * Limits of one push request: push services answer fast, and a message is small. Durations as
 * values, not text: the text would be parsed again for every request.
 */
export const sendLimits: Partial<OutboundSender.SendLimits> = {
  connectTimeout: Duration.seconds(5),
  totalTimeout: Duration.seconds(10),
  maxRequestBytes: 8 * 1024,
  maxResponseBytes: 2000,
}

/** A registration that gets a request: it has an endpoint (and so its keys). */
export type Sendable = Target & { readonly endpoint: string }

const ttlSecondsOf = (leftMillis: number) => Math.max(0, Math.ceil(leftMillis / 1000))

/** One attempt's view of its batch: the event, the time left of its TTL, and the rights asked. */
export interface Attempt {
  readonly args: BatchArgs
  readonly event: TargetEvent
  readonly rights: ReadonlyMap<string, boolean>
  readonly ledger: Ledger
  readonly progress: PushProgress.PushProgress
}

/**
 * `send` and what it shares across attempts: the VAPID token cache (`options.tokens`), the
 * checked connections, the encryption threads.
 */
export const make = Effect.fnUntraced(function* (options: { readonly tokens?: PushVapid.TokenCacheOptions } = {}) {
  const config = yield* PushConfig
  const sql = yield* SqlClient.SqlClient
  const tokens = yield* PushVapid.makeTokenCache(config.vapid, options.tokens)
  const connections = yield* PushConnections.make(config, sendLimits)
  const encryption = yield* PushEncryption.make(config.encryptionThreads ?? defaults.encryptionThreads)
  const ttlMillis = Duration.toMillis(config.ttl)
  // Once a minute per push service: a wrong VAPID key fails every message to it.
  const configError = ThrottledWarnings.make("1 minute", Effect.logError)

  /** What is left of the TTL now, in milliseconds. */
  const ttlLeft = (event: TargetEvent) =>
    Effect.map(Clock.currentTimeMillis, (now) => ttlMillis - (now - event.occurredAt.getTime()))

  /** What one registration's message is made of: its envelope, its keys, its headers. */
  const inputOf = (attempt: Attempt, t: Sendable, origin: string, left: number) =>
    Effect.map(tokens.authorization(origin), (authorization): PushRequest.PushRequestInput => {
      const { event, args } = attempt
      const key = PushMessageKey.make(event.epoch, t.registration, BigInt(args.seq))
      return {
        endpoint: t.endpoint,
        p256dh: t.p256dh!,
        auth: t.auth!,
        payload: PushEnvelope.body({ key, ...event, seq: BigInt(args.seq) }),
        ttlSeconds: ttlSecondsOf(left),
        urgency: "normal",
        topic: PushMessageKey.topic(key),
        authorization,
      }
    })

  /** The requests of an attempt's registrations, built in one go (`PushEncryption.buildMany`). */
  const prepare = (attempt: Attempt, targets: ReadonlyArray<Sendable>) =>
    Effect.gen(function* () {
      const left = yield* ttlLeft(attempt.event)
      const inputs = yield* Effect.forEach(targets, (t) => inputOf(attempt, t, new URL(t.endpoint).origin, left))
      const built = yield* encryption.buildMany(inputs)
      return new Map(targets.map((t, i) => [t.registration, built[i]!] as const))
    })

  /** The request to one registration (`prepare`'s), sent, and what its answer makes of it. */
  const send = (attempt: Attempt, t: Sendable, origin: string, build: PushEncryption.Build) =>
    Effect.gen(function* () {
      const { event, ledger } = attempt
      const built = yield* build.pipe(
        Effect.catchTag("PushPayloadTooLarge", (e) =>
          Effect.as(
            Effect.andThen(
              PushMetrics.count("payload_too_large"),
              Effect.sync(() => ledger.die(t.registration, e.message)),
            ),
            undefined,
          ),
        ),
      )
      if (built === undefined) return
      // The TTL as it stands when the request leaves, not when the batch was encrypted.
      const request = { ...built, headers: { ...built.headers, TTL: String(ttlSecondsOf(yield* ttlLeft(event))) } }
      const result = yield* OutboundSender.send(request, config.policy, sendLimits, connections)
      const answered = yield* Clock.currentTimeMillis
      const verdict = PushOutcome.classify(result, answered)
      switch (verdict._tag) {
        case "Delivered":
          yield* Metric.update(PushMetrics.handoffLatency, (answered - event.occurredAt.getTime()) / 1000)
          yield* PushMetrics.count("delivered")
          return ledger.settle(t.registration)
        case "Gone":
          yield* PushMetrics.count("gone")
          yield* PushRegistrations.removeGone(sql, t.registration, "its push service says it is gone")
          return ledger.settle(t.registration)
        case "Throttled":
          yield* PushMetrics.count("throttled")
          return ledger.throttle(origin, t.registration, verdict.delay)
        case "Retry":
          yield* PushMetrics.count("retried")
          return ledger.fail(t.registration, verdict.reason)
        case "Dead":
          if (verdict.outcome === "config_error") {
            const host = new URL(t.endpoint).host
            yield* configError(
              host,
              `push: ${host}: ${verdict.reason} (registration ${t.registration} kept; every push to it is likely refused; counted in bothy.push.deliveries{outcome="config_error"})`,
            )
          }
          yield* PushMetrics.count(verdict.outcome)
          return ledger.die(t.registration, verdict.reason)
      }
    })

  return { prepare, send, ttlLeft }
})

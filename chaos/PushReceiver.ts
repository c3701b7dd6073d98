/**
 * The push service of a chaos run, independent of bothy: the kit's Web Push fake
 * (`testkit/PushService`) with a path per registration, generated as a browser makes one (a P-256
 * key pair and an auth secret). Every message must carry a valid VAPID token signed by the run's
 * application server key and decrypt (aes128gcm) with that browser's keys, or it is recorded as a
 * rejection (and fails the verdict).
 *
 * Each message that passes is recorded compactly (registration, the envelope's `event`, answer, time).
 * Faults are scripted per registration: the next messages get 500, 429 with `Retry-After`, or hang
 * (no answer until the run ends; the sender gives up on its own); a `gone` registration gets 410
 * for good. Everything else gets 201, and so does a message right after a failed one.
 */
import { Effect } from "effect"
import * as PushService from "../testkit/PushService.ts"

export type Answer = 500 | 429 | "hang"

export interface Arrival {
  readonly registration: string
  /** The envelope's `event`, `<epoch>.<seq>` (its `id` is the message's key, per registration). */
  readonly id: string
  readonly space: string
  /** What was answered; 0 for a hang. */
  readonly status: number
  readonly at: number
}

export interface Rejection {
  readonly registration: string
  readonly reason: string
  readonly at: number
}

const retryAfterSeconds = "1"

const asAnswer = (answer: Answer): PushService.Answer =>
  answer === "hang"
    ? { hang: true }
    : answer === 429
      ? { status: 429, retryAfter: retryAfterSeconds }
      : { status: answer }

export const start = (applicationServerKey: string) =>
  Effect.gen(function* () {
    const arrivals: Array<Arrival> = []
    const rejections: Array<Rejection> = []
    const service = yield* PushService.start({
      applicationServerKey,
      keep: false,
      // As the webhook receiver does: a scripted failure waits for a 201 after the last one.
      failuresApart: true,
      onDelivered: (d) => {
        const envelope = JSON.parse(d.plaintext) as { readonly event: string; readonly space: string }
        arrivals.push({
          registration: d.subscriptionId,
          id: envelope.event,
          space: envelope.space,
          status: d.status ?? 0,
          at: d.receivedAt,
        })
      },
      onRejected: (r) => {
        rejections.push({ registration: r.subscriptionId ?? "", reason: r.reason, at: r.receivedAt })
      },
    })
    return {
      /** A browser subscription for the registration `name`, as `PushSubscription.toJSON()` gives it. */
      subscribe: (name: string) => service.subscribe(name).json,
      /** The next `count` messages to the registration `name` get `answer`. */
      script: (name: string, answer: Answer, count: number) =>
        service.script(
          name,
          Array.from({ length: count }, () => asAnswer(answer)),
        ),
      /** From now on every message to the registration `name` gets 410, as from a subscription the browser dropped. */
      gone: (name: string) => service.gone(name),
      arrivals: arrivals as ReadonlyArray<Arrival>,
      rejections: rejections as ReadonlyArray<Rejection>,
    }
  })

export type PushReceiver = Effect.Success<ReturnType<typeof start>>

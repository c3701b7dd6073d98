/**
 * The demo's world in the database: subscriptions of the owner `demo` to the local receiver, and
 * two members of the demo's spaces with a registered browser each on the local push service.
 * Made on the first start; a later start on the same `BOTHY_HOME` keeps the log and the
 * subscriptions, and replaces the browsers (their private keys lived in the process that stopped).
 *
 * The receiver keeps what a real receiver keeps, in `BOTHY_HOME/demo.json` (mode 0600): its port,
 * so the kept subscriptions still reach it, and each subscription's signing secret (shown once, at
 * creation), so it verifies from its first request on, before this setup runs again. A kept
 * subscription whose secret was lost gets a new one; one whose port could not be had again is
 * replaced.
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Effect, Option, Redacted, Schema } from "effect"
import { SqlClient } from "effect/sql"
import * as PermissionGrants from "../authz/PermissionGrants.ts"
import { pushDeliver, webhookDeliver } from "../authz/Permissions.ts"
import * as EventLog from "../log/EventLog.ts"
import * as Status from "../ops/Status.ts"
import * as PushAudience from "../push/PushAudience.ts"
import * as PushRegistrations from "../push/PushRegistrations.ts"
import { WebhookSubscriptions } from "../webhooks/subscriptions/WebhookSubscriptions.ts"
import type { DemoNativeServices } from "./DemoNativeServices.ts"
import type { DemoPushService } from "./DemoPushService.ts"
import type * as DemoReceiver from "./DemoReceiver.ts"

export const owner = "demo"
export const spaces = ["demo-space-1", "demo-space-2", "demo-space-3"] as const
export const members = ["demo-user-1", "demo-user-2"] as const

/** The demo's subscriptions, each named by its path on the receiver. */
const subscriptions = [
  { name: "everything", scope: spaces, eventTypes: [] },
  { name: "space-1", scope: [spaces[0]], eventTypes: [] },
  { name: "orders", scope: spaces, eventTypes: ["order.created"] },
] as const

const stateFile = (home: string) => join(home, "demo.json")

const KeptFile = Schema.Struct({
  receiverPort: Schema.optional(Schema.Int),
  secrets: Schema.optional(Schema.Record(Schema.String, Schema.String)),
})

/** What an earlier start kept (nothing when there was none, or its file does not parse). */
export const kept = (home: string): DemoReceiver.Kept => {
  const file = stateFile(home)
  const value = existsSync(file)
    ? Option.getOrUndefined(Schema.decodeUnknownOption(Schema.fromJsonString(KeptFile))(readFileSync(file, "utf8")))
    : undefined
  return {
    receiverPort: value?.receiverPort,
    secrets: new Map(Object.entries(value?.secrets ?? {}).map(([name, secret]) => [name, Redacted.make(secret)])),
  }
}

const keep = (home: string, receiver: DemoReceiver.DemoReceiver) => {
  const file = stateFile(home)
  const secrets = Object.fromEntries([...receiver.secrets()].map(([name, secret]) => [name, Redacted.value(secret)]))
  writeFileSync(file, `${JSON.stringify({ receiverPort: receiver.port, secrets })}\n`, { mode: 0o600 })
  chmodSync(file, 0o600)
}

export interface Prepared {
  /** Whether the database held data of an earlier start. */
  readonly reused: boolean
  /** The log's head when the demo began. */
  readonly head: bigint
  readonly subscriptions: number
  /** Of those, how many were there already. */
  readonly reusedSubscriptions: number
  readonly registrations: number
}

const subscribe = (receiver: DemoReceiver.DemoReceiver, s: (typeof subscriptions)[number]) =>
  Effect.gen(function* () {
    for (const space of s.scope) yield* PermissionGrants.grant(owner, webhookDeliver, space)
    const created = yield* (yield* WebhookSubscriptions).create({
      owner,
      url: receiver.url(s.name),
      scope: s.scope,
      eventTypes: s.eventTypes,
    })
    receiver.accept(s.name, created.secret)
  })

/** Subscriptions: the kept ones reused (a new secret if the receiver lost it), the missing ones made. */
const prepareSubscriptions = (receiver: DemoReceiver.DemoReceiver) =>
  Effect.gen(function* () {
    const webhooks = yield* WebhookSubscriptions
    // A demo has a handful; the list is bounded all the same.
    const found = (yield* Status.subscriptionList(1000)).filter((s) => s.owner === owner)
    for (const s of subscriptions) {
      const same = found.find((k) => k.url === receiver.url(s.name))
      if (same === undefined) yield* subscribe(receiver, s)
      else if (!receiver.secrets().has(s.name)) receiver.accept(s.name, yield* webhooks.rotateSecret(same.id))
    }
    const moved = found.filter((k) => !subscriptions.some((s) => k.url === receiver.url(s.name)))
    for (const k of moved) yield* webhooks.remove(k.id)
    return found.length - moved.length
  })

/** Each member in every space with the right to receive, and one new browser, iPhone and Android phone registered. */
const prepareBrowsers = (push: DemoPushService, native: DemoNativeServices) =>
  Effect.gen(function* () {
    for (const principal of members) {
      for (const space of spaces) {
        yield* PushAudience.join(space, principal)
        yield* PermissionGrants.grant(principal, pushDeliver, space)
      }
      for (const old of yield* PushRegistrations.list(principal)) yield* PushRegistrations.remove(old.id)
      yield* PushRegistrations.register(principal, push.subscribe())
      yield* PushRegistrations.registerNative(principal, "apns", {
        token: native.device(),
        topic: "com.example.bothy-demo",
        environment: "sandbox",
      })
      yield* PushRegistrations.registerNative(principal, "fcm", { token: native.fcmToken() })
    }
    return members.length
  })

export const prepare = (
  home: string,
  receiver: DemoReceiver.DemoReceiver,
  push: { readonly service: DemoPushService; readonly native: DemoNativeServices } | undefined,
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql<{ head: bigint }>`SELECT ${EventLog.headSeq(sql)} AS head`
    const head = row?.head ?? 0n
    const reusedSubscriptions = yield* prepareSubscriptions(receiver)
    const registrations = push === undefined ? 0 : yield* prepareBrowsers(push.service, push.native)
    keep(home, receiver)
    return {
      reused: head > 0n || reusedSubscriptions > 0,
      head,
      subscriptions: subscriptions.length,
      reusedSubscriptions,
      registrations,
    } satisfies Prepared
  })

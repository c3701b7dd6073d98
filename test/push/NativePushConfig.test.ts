import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Option, Redacted } from "effect"
import { envName } from "../../src/platform/BothyConfig.ts"
import * as NativePushConfig from "../../src/push/NativePushConfig.ts"
import * as PushConfig from "../../src/push/PushConfig.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as ApnsService from "../../testkit/ApnsService.ts"
import * as FcmService from "../../testkit/FcmService.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

const keys = NativePushConfig.keys
const vapid = PushVapid.generate()
const pushOn = {
  [envName(PushConfig.keys.publicKey)]: vapid.publicKey,
  [envName(PushConfig.keys.privateKey)]: vapid.privateKey,
  [envName(PushConfig.keys.subject)]: "mailto:native@example.com",
}
const apnsKey = ApnsService.makeKey()
const account = FcmService.makeServiceAccount()
const apnsEnv = {
  [envName(keys.apnsKey)]: apnsKey.p8,
  [envName(keys.apnsKeyId)]: apnsKey.keyId,
  [envName(keys.apnsTeamId)]: apnsKey.teamId,
}
const fcmEnv = { [envName(keys.fcmServiceAccount)]: account.json }

const load = (env: Record<string, string>) =>
  PushConfig.load({ allowHttpLoopback: false, allowCidrs: [], allowHosts: [] }).pipe(
    Effect.provide(ConfigProvider.layer(ConfigProvider.fromEnv({ env, preserveEmptyStrings: true }))),
  )

/** The one line a refused start prints, asserted never to quote a secret. */
const refusal = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const exit = yield* Effect.exit(load(env))
    assert.isTrue(Exit.isFailure(exit), "refused")
    const message = Exit.isFailure(exit) ? String((exit.cause.reasons[0] as { error: Error }).error.message) : ""
    assert.notInclude(message, "PRIVATE KEY")
    assert.notInclude(message, apnsKey.p8.split("\n")[1]!)
    assert.notInclude(message, vapid.privateKey)
    assert.notInclude(message, "\n")
    return message
  })

describe("native push credentials", () => {
  it.effect(
    "NativePushCredentialsLoad: APNs' three settings and FCM's service account load Redacted; none is native push off",
    () =>
      Effect.gen(function* () {
        const both = yield* load({ ...pushOn, ...apnsEnv, ...fcmEnv })
        assert.isTrue(Option.isSome(both))
        const settings = Option.getOrThrow(both)
        assert.strictEqual(settings.apns?.keyId, apnsKey.keyId)
        assert.strictEqual(settings.apns?.teamId, apnsKey.teamId)
        assert.isTrue(Redacted.isRedacted(settings.apns?.key))
        assert.strictEqual(settings.fcm?.projectId, account.projectId)
        assert.strictEqual(settings.fcm?.clientEmail, account.clientEmail)
        assert.notInclude(JSON.stringify(settings), "PRIVATE KEY")
        assert.notInclude(String(settings.fcm?.privateKey), "PRIVATE KEY")
        const none = Option.getOrThrow(yield* load(pushOn))
        assert.isUndefined(none.apns)
        assert.isUndefined(none.fcm)
      }),
  )

  it.effect(
    "NativePushCredentialsRefusedAtStart: incomplete or malformed keys are refused with one line naming the setting and never quoting it",
    () =>
      Effect.gen(function* () {
        const { [envName(keys.apnsTeamId)]: _, ...noTeam } = apnsEnv
        assert.match(
          yield* refusal({ ...pushOn, ...noTeam }),
          /APNs needs BOTHY_PUSH_APNS_TEAM_ID \(push\.apns_team_id\)/,
        )
        assert.match(
          yield* refusal({ ...pushOn, ...apnsEnv, [envName(keys.apnsKey)]: "-----BEGIN PRIVATE KEY-----\nnope\n" }),
          /BOTHY_PUSH_APNS_KEY \(push\.apns_key\) is not an APNs \.p8 key/,
        )
        // An RSA key is a key, but not the P-256 key APNs issues.
        const rsa = JSON.parse(account.json).private_key as string
        assert.match(yield* refusal({ ...pushOn, ...apnsEnv, [envName(keys.apnsKey)]: rsa }), /not an APNs \.p8 key/)
        assert.match(yield* refusal({ ...pushOn, ...apnsEnv, [envName(keys.apnsKeyId)]: "abc" }), /is not a key id/)
        assert.match(yield* refusal({ ...pushOn, ...apnsEnv, [envName(keys.apnsTeamId)]: " " }), /is set but empty/)
        assert.match(yield* refusal({ ...pushOn, ...fcmEnv, [envName(keys.fcmServiceAccount)]: "{" }), /is not JSON/)
        const { private_key: _key, ...noKey } = JSON.parse(account.json)
        assert.match(
          yield* refusal({ ...pushOn, [envName(keys.fcmServiceAccount)]: JSON.stringify(noKey) }),
          /BOTHY_PUSH_FCM_SERVICE_ACCOUNT \(push\.fcm_service_account\) lacks private_key/,
        )
        const ecKey = { ...JSON.parse(account.json), private_key: apnsKey.p8 }
        assert.match(
          yield* refusal({ ...pushOn, [envName(keys.fcmServiceAccount)]: JSON.stringify(ecKey) }),
          /private_key that is not an RSA private key/,
        )
        assert.match(yield* refusal({ ...apnsEnv }), /APNs credentials are set but push is off/)
      }),
  )

  it.live(
    "NativePushCredentialsRefusedAtStart: bothy worker with half of APNs' settings stops with that one line",
    () =>
      Effect.gen(function* () {
        const { [envName(keys.apnsKeyId)]: _, ...noKeyId } = apnsEnv
        const out = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
          DATABASE_URL: "postgres://nobody@127.0.0.1:1/none",
          BOTHY_WEBHOOK_SECRET_KEY: WorkerProcess.rawKey(),
          ...pushOn,
          ...noKeyId,
        })
        assert.strictEqual(out.code, 1, out.stderr)
        assert.match(
          out.stderr.trim(),
          /^bothy: invalid configuration: APNs needs BOTHY_PUSH_APNS_KEY_ID \(push\.apns_key_id\) as well/,
        )
        assert.strictEqual(out.stderr.trim().split("\n").length, 1, out.stderr)
        assert.notInclude(out.stderr, "PRIVATE KEY")
        assert.notInclude(out.stdout, "worker running")
      }),
  )
})

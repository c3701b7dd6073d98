/**
 * What `bothy start` adds to the environment while its demo runs on the embedded database, each
 * only where the environment says nothing (a variable that is set always wins):
 *
 * - webhook targets and push endpoints on loopback allowed (`webhook.allow_http_loopback`), and
 *   127.0.0.1 as a push service host (`push.hosts`): the demo's receiver and push service are local;
 * - VAPID keys, so that push runs: made once and kept in `BOTHY_HOME/push-vapid-keys` (mode 0600,
 *   refused when others may read it, as the sealing key file is), unless the environment gives
 *   any of the three push keys itself (then it must give all, as for `bothy worker`).
 */
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { ConfigProvider, Effect, Layer, Option, Schema } from "effect"
import { envName, InvalidConfig, variable } from "../platform/BothyConfig.ts"
import * as PushConfig from "../push/PushConfig.ts"
import * as PushVapid from "../push/PushVapid.ts"

export const vapidFile = (home: string) => join(home, "push-vapid-keys")

const subject = "mailto:demo@bothy.localhost"

const KeyFile = Schema.Struct({ publicKey: Schema.String, privateKey: Schema.String })

const refuse = (file: string, why: string) =>
  new InvalidConfig({ keys: [PushConfig.keys.privateKey], detail: `the demo's VAPID key file ${file} ${why}` })

/** The key pair in `file`, made there first when missing. */
const keysIn = (file: string) =>
  Effect.gen(function* () {
    const raw = yield* Effect.try({
      try: () => {
        if (!existsSync(file)) {
          mkdirSync(dirname(file), { recursive: true })
          writeFileSync(file, `${JSON.stringify(PushVapid.generate())}\n`, { mode: 0o600 })
        }
        return { text: readFileSync(file, "utf8"), mode: statSync(file).mode & 0o777 }
      },
      catch: (e) => refuse(file, `cannot be used: ${String(e)}`),
    })
    if ((raw.mode & 0o077) !== 0) return yield* refuse(file, `is open to other users; run chmod 600 ${file}`)
    return yield* Schema.decodeUnknownEffect(Schema.fromJsonString(KeyFile))(raw.text.trim()).pipe(
      Effect.mapError(() => refuse(file, "is not the JSON it wrote; remove it to make a new pair")),
    )
  })

/** Whether the environment gives any of the push keys. */
const pushConfigured = Effect.map(
  Effect.forEach(Object.values(PushConfig.keys), (key) => variable(envName(key), { key, unset: "to turn push off" })),
  (values) => values.some(Option.isSome),
)

/** A layer that adds the demo's defaults beneath the current environment. */
export const layer = (home: string) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const env: Record<string, string> = {
        [envName("webhook.allow_http_loopback")]: "true",
        [envName("push.hosts")]: "127.0.0.1",
      }
      if (!(yield* pushConfigured)) {
        const keys = yield* keysIn(vapidFile(home))
        env[envName(PushConfig.keys.publicKey)] = keys.publicKey
        env[envName(PushConfig.keys.privateKey)] = keys.privateKey
        env[envName(PushConfig.keys.subject)] = subject
      }
      return ConfigProvider.layerAdd(ConfigProvider.fromEnv({ env }))
    }),
  )

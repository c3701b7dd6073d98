/**
 * The settings table of docs/configuration.md, generated from the code that defines the settings.
 *
 * bothy's settings are declared where they are read (`BothyConfig.setting(key, default, parse)` in
 * `BothyConfig`, `Database`, `WebhookConfig`, `TargetPolicyConfig`, `PushConfig`, `AdminServer`,
 * `AdminAuth`, `MetricsEndpoint`, `SecretBox`, `bin/bothy.ts`), and none of them carries a
 * description, so the table is put together here:
 *
 * - the key and its variable come from the code (`BothyConfig.envName`);
 * - the default is asked of the code itself: each setting's reader is run with its variable set but
 *   empty, and the `InvalidConfig` it refuses that with names the default it would have used
 *   ("unset it to use the default ..."), or says there is none;
 * - what each setting means is kept in `meanings` below, the one thing written by hand.
 *
 * `declaredKeys` finds the keys the code declares, so a setting added to `src/` without a row here
 * (or a row left for a setting that is gone) fails `ConfigTableIsCurrent`.
 *
 * `npx node test/support/writeConfigTable.ts` rewrites the block of docs/configuration.md between
 * the markers.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { ConfigProvider, Data, Effect, Layer, Option, Redacted } from "effect"
import * as AdminAuth from "../../src/admin/AdminAuth.ts"
import * as AdminServer from "../../src/admin/AdminServer.ts"
import * as ConsoleSettings from "../../src/console/ConsoleSettings.ts"
import * as SecretBox from "../../src/crypto/SecretBox.ts"
import * as MetricsEndpoint from "../../src/ops/MetricsEndpoint.ts"
import * as TargetPolicyConfig from "../../src/outbound/TargetPolicyConfig.ts"
import * as BothyConfig from "../../src/platform/BothyConfig.ts"
import * as Database from "../../src/platform/Database.ts"
import * as DatabaseSchema from "../../src/platform/DatabaseSchema.ts"
import * as NativePushConfig from "../../src/push/NativePushConfig.ts"
import * as PushConfig from "../../src/push/PushConfig.ts"
import * as PushVapid from "../../src/push/PushVapid.ts"
import * as WebhookConfig from "../../src/webhooks/WebhookConfig.ts"

const root = join(import.meta.dirname, "..", "..")

/** The variables that are not `BOTHY_...` settings. */
const databaseUrl = "DATABASE_URL"
const databaseDirectUrl = "DATABASE_DIRECT_URL"
const plain: ReadonlySet<string> = new Set([databaseUrl, databaseDirectUrl])

/** What each setting means, in the table's order. Bounds that the code checks are named here too. */
export const meanings: ReadonlyArray<readonly [key: string, meaning: string]> = [
  ["consumer.batch_size", "events per consumer round (1 to 100000)"],
  ["consumer.poll_interval", "wake-up without a NOTIFY (10ms to 10m)"],
  [
    "consumer.cooldown",
    "least time between the starts of two wake-ups' rounds of the `webhooks` consumer; `0s`: none (0s to 10s, and strictly below `consumer.poll_interval`)",
  ],
  [
    "consumer.pending_alert_after",
    "age of the oldest unprocessed event that pages (`BothyEventConsumerLag`, see [operations.md](operations.md#bothyeventconsumerlag)); must be strictly below `sync.event_retention` (1m to 30d)",
  ],
  [
    "sync.event_retention",
    "time window the log keeps (whole days older than it are detached and dropped, see [retention.md](retention.md)); must be above 5 days 10 hours (see below); 1d to 3650d",
  ],
  [
    "log.sequencing",
    "how appends get their seqs: `counter` (in the append, commits serialized) or `post_commit` (after commit, by a sequencer; see [library.md](library.md#sequencing-counter-or-post_commit))",
  ],
  ["database.pool_size", "connections in the pool (1 to 1000)"],
  [
    "database.schema",
    "the schema bothy's tables live in, created by `bothy migrate` when missing: lower-case letters, digits and `_`; a named one must come first on the connections' `search_path` (bothy asks for it on direct connections; through a pooler the role carries it, see [operations.md](operations.md#a-schema-of-its-own))",
  ],
  [
    "jobs.lease",
    "how long a worker's jobs survive its silence before another worker puts them back (3s to 10m); a killed worker's come back within about a second anyway (see [jobs.md](jobs.md#how-jobs-run))",
  ],
  ["home", "folder of the embedded server's data, password and webhook key"],
  ["embedded_port", "port of the embedded server (1 to 65535)"],
  [
    "webhook.secret_key",
    "key that seals webhook signing secrets at rest: standard base64 of 32 random bytes (`openssl rand -base64 32`); required with `DATABASE_URL`, and never printed (see [below](#the-sealing-key))",
  ],
  [
    "webhook.allow_http_loopback",
    "let webhook targets on loopback addresses through, and plain `http` to a loopback host; for tests and local development (`true`, `false`, `1`, `0`, `yes`, `no`)",
  ],
  [
    "webhook.allow_cidrs",
    "comma-separated ranges or addresses let through despite the blocked ranges (`10.1.0.0/16,fd00:1::/32`); an entry that does not parse refuses the start",
  ],
  ["webhook.allow_hosts", "comma-separated host names (or IP literals) whose addresses are not checked at all"],
  ["webhook.max_in_flight", "webhook drain runs a worker has in flight at once (1 to 10000)"],
  [
    "webhook.owner_max_in_flight",
    "of those, at most this many for one owner's subscriptions; not above `webhook.max_in_flight` (1 to 10000)",
  ],
  [
    "webhook.history_retention",
    "finished (delivered or dead) deliveries and their attempts older than this are removed; unset: `sync.event_retention` (1h to 3650d)",
  ],
  [
    "webhook.permission_max_age",
    "right and scope read longer before a delivery's request are checked again first (100ms to 1m)",
  ],
  [
    "webhook.traceparent",
    "send the W3C `traceparent` header (the attempt's span, in the event's trace) so a receiver can join the trace; it tells receivers your trace ids",
  ],
  [
    "webhook.degraded_failure_rate",
    "a subscription whose failed attempts over the window are above this share is degraded (still delivering), and recovers below it: a rate strictly between 0 and 1, `0.5` or `50%`",
  ],
  ["webhook.degraded_window", "the window the failure rate is taken over (1m to 1d)"],
  ["webhook.degraded_min_attempts", "fewer attempts in the window never degrade a subscription (1 to 1000000)"],
  [
    "push.vapid_public_key",
    "VAPID public key (base64url, 65 bytes: `bothy push keys`); with the private key and subject, push is on; none of the three: push is off; some: the start is refused",
  ],
  ["push.vapid_private_key", "its private key (base64url, 32 bytes); must derive the public key; never printed"],
  ["push.subject", "who runs this sender, for the push services: a `mailto:` address or an `https:` URL"],
  [
    "push.hosts",
    "comma-separated push-service hosts a registration's endpoint may name: names, `*.domain` (subdomains), or `*` alone (any public host, for a self-hosted push server); the default is the push services of the big browsers",
  ],
  [
    "push.ttl",
    "how long a push service keeps an undelivered message, and how long a failing one is retried (0s to 4w)",
  ],
  ["push.registration_max_age", "registrations not refreshed for this long are removed (1d to 3650d)"],
  ["push.max_in_flight", "push messages a worker has in flight at once, whatever their jobs (1 to 10000)"],
  [
    "push.batch_size",
    "registrations one push job sends an event to (1 to 1000; see [push.md](push.md#one-job-per-batch))",
  ],
  [
    "push.encryption_threads",
    "threads that encrypt push messages (aes128gcm) off the event loop: auto (one per core) or 0 to 64 (0: on it)",
  ],
  [
    "push.apns_key",
    "APNs token-based auth: the `.p8` key's PEM text (a P-256 private key); with the key id and team id, iOS devices are reached (see [push.md](push.md#native-push-apns-and-fcm)); never printed",
  ],
  ["push.apns_key_id", "the `.p8` key's 10-character key id"],
  ["push.apns_team_id", "the Apple developer team's 10-character id"],
  [
    "push.fcm_service_account",
    "FCM HTTP v1: the Firebase service account's JSON key file, its text (`project_id`, `client_email`, `private_key`); Android devices are reached; never printed",
  ],
  [
    "log_level",
    "least level logged: `all`, `trace`, `debug`, `info`, `warn`, `error`, `fatal`, `none`; the `--log-level` flag overrides it for one run",
  ],
  [
    "metrics.address",
    "where the worker serves `/metrics`: `host:port`, `[v6]:port`, `0.0.0.0:9464`, port `0` for any free one, `off` for none",
  ],
  ["admin.address", "where the worker serves the admin API: same forms as `metrics.address`, `off` for none"],
  [
    "admin.token",
    "the operator's bearer token for the admin API; unset: the API is open, and served on a loopback address only",
  ],
  [
    "admin.max_body_bytes",
    "the largest request body the admin API reads, in bytes (1024 to 67108864); a larger one is a 413 before it is read",
  ],
  ["console.title", "the console's and portal's title, 1 to 80 characters"],
  ["console.logo_url", "a logo shown beside the title: an `https:` URL or a path on the admin server; empty for none"],
  ["console.accent", "the console's colour (header, buttons), as `#rrggbb`"],
  [
    "console.frame_ancestors",
    "who may show the console in a frame (CSP `frame-ancestors`): `'none'`, `'self'` or origins such as `https://app.example.com`, separated by spaces",
  ],
  [
    "console.session_seconds",
    "how long a console session lasts after sign-in, in seconds (60 to 604800); a portal link's session ends with the link",
  ],
  [
    databaseUrl,
    "an external PostgreSQL, 15 to 18 (older is refused at start); TLS by libpq's `sslmode`/`sslrootcert` ([operations.md](operations.md#your-own-postgresql)); several hosts (`h1:5432,h2:5432`) for a primary and its standbys ([failover](operations.md#failover)); when set, no embedded server starts",
  ],
  [
    databaseDirectUrl,
    "a direct connection to the same database, for what a transaction pooler on `DATABASE_URL` cannot carry: LISTEN and retention's detaches (see [operations.md](operations.md#behind-a-pooler))",
  ],
]

/** The variable a key is read from. */
export const variableOf = (key: string) => (plain.has(key) ? key : BothyConfig.envName(key))

// ---------------------------------------------------------------------------------------------
// Asking the code for each default

/** How to reach a setting's reader: an effect that reads it (with `env` as the environment). */
type Probe =
  | { readonly _tag: "Read"; readonly read: Effect.Effect<unknown, unknown>; readonly env?: Record<string, string> }
  /** A reader no module exports (`bin/bothy.ts` runs its command when imported): its source line. */
  | { readonly _tag: "Source"; readonly file: string }

const read = (effect: Effect.Effect<unknown, unknown>, env?: Record<string, string>): Probe =>
  env === undefined ? { _tag: "Read", read: effect } : { _tag: "Read", read: effect, env }

const someKey = Effect.flatMap(SecretBox.parseKey(Redacted.make(Buffer.alloc(32, 7).toString("base64"))), (key) =>
  WebhookConfig.load(Effect.succeed(key)),
)
const vapid = PushVapid.generate()
const pushOn = {
  [BothyConfig.envName(PushConfig.keys.publicKey)]: vapid.publicKey,
  [BothyConfig.envName(PushConfig.keys.privateKey)]: vapid.privateKey,
  [BothyConfig.envName(PushConfig.keys.subject)]: "mailto:config-table@example.com",
}
const push = read(PushConfig.load({ allowHttpLoopback: false, allowCidrs: [], allowHosts: [] }), pushOn)
// With a URL set, the pool's size is read before any connection is tried; without one, the port is
// read before the embedded server starts. Either way the empty variable stops the layer first.
const databaseLayer = (env: Record<string, string>) => read(Effect.scoped(Layer.build(Database.layer)), env)

const probes: Record<string, Probe> = {
  "consumer.batch_size": read(BothyConfig.load),
  "consumer.poll_interval": read(BothyConfig.load),
  "consumer.cooldown": read(BothyConfig.load),
  "consumer.pending_alert_after": read(BothyConfig.load),
  "sync.event_retention": read(BothyConfig.load),
  "log.sequencing": read(BothyConfig.load),
  "jobs.lease": read(BothyConfig.load),
  "database.pool_size": databaseLayer({ [databaseUrl]: "postgres://probe@127.0.0.1:1/probe" }),
  "database.schema": read(DatabaseSchema.load),
  home: read(Database.home),
  embedded_port: databaseLayer({}),
  "webhook.secret_key": read(SecretBox.keySetting),
  "webhook.allow_http_loopback": read(TargetPolicyConfig.load),
  "webhook.allow_cidrs": read(TargetPolicyConfig.load),
  "webhook.allow_hosts": read(TargetPolicyConfig.load),
  "webhook.max_in_flight": read(someKey),
  "webhook.owner_max_in_flight": read(someKey),
  "webhook.history_retention": read(someKey),
  "webhook.permission_max_age": read(someKey),
  "webhook.traceparent": read(someKey),
  "webhook.degraded_failure_rate": read(someKey),
  "webhook.degraded_window": read(someKey),
  "webhook.degraded_min_attempts": read(someKey),
  "push.vapid_public_key": push,
  "push.vapid_private_key": push,
  "push.subject": push,
  "push.hosts": push,
  "push.ttl": push,
  "push.registration_max_age": push,
  "push.max_in_flight": push,
  "push.batch_size": push,
  "push.encryption_threads": push,
  "push.apns_key": push,
  "push.apns_key_id": push,
  "push.apns_team_id": push,
  "push.fcm_service_account": push,
  log_level: { _tag: "Source", file: "src/bin/bothy.ts" },
  "metrics.address": read(MetricsEndpoint.loadAddress),
  "admin.address": read(AdminServer.loadAddress),
  "admin.token": read(AdminAuth.loadToken),
  "admin.max_body_bytes": read(AdminServer.loadMaxBodyBytes),
  "console.title": read(ConsoleSettings.loadTitle),
  "console.logo_url": read(ConsoleSettings.loadLogoUrl),
  "console.accent": read(ConsoleSettings.loadAccent),
  "console.frame_ancestors": read(ConsoleSettings.loadFrameAncestors),
  "console.session_seconds": read(ConsoleSettings.loadSessionSeconds),
  [databaseUrl]: read(Database.external),
  [databaseDirectUrl]: read(Database.directUrl),
}

/** A setting whose reader could not be asked, or did not answer as expected. */
export class ProbeFailed extends Data.TaggedError("ProbeFailed")<{ readonly message: string }> {}

const emptyRefusal = /is set but empty; unset it (?:to use the default ("(?:[^"\\]|\\.)*")|.*?), or give a value/

/** What the reader of `key` falls back to when its variable is unset, asked of the reader itself. */
export const defaultOf = (key: string): Effect.Effect<Option.Option<string>, ProbeFailed> => {
  const probe = probes[key]
  if (probe === undefined)
    return Effect.fail(new ProbeFailed({ message: `no probe for ${key}: add one to test/support/ConfigTable.ts` }))
  if (probe._tag === "Source") {
    const source = readFileSync(join(root, probe.file), "utf8")
    const found = new RegExp(`setting\\(\\s*"${key.replaceAll(".", "\\.")}",\\s*("(?:[^"\\\\]|\\\\.)*")`).exec(source)
    return found === null
      ? Effect.fail(new ProbeFailed({ message: `${probe.file} no longer declares ${key} with a literal default` }))
      : Effect.succeed(Option.some(JSON.parse(found[1]!) as string))
  }
  const env = { ...probe.env, [variableOf(key)]: "" }
  const provider = ConfigProvider.fromEnv({ env, preserveEmptyStrings: true })
  return probe.read.pipe(
    Effect.provide(ConfigProvider.layer(provider)),
    Effect.flip,
    Effect.mapError(() => new ProbeFailed({ message: `${key}'s reader accepted ${variableOf(key)} set but empty` })),
    Effect.flatMap((error) => {
      const detail = error instanceof BothyConfig.InvalidConfig ? error.detail : String(error)
      const refused = emptyRefusal.exec(detail)
      if (!(error instanceof BothyConfig.InvalidConfig) || !error.keys.includes(key) || refused === null) {
        return Effect.fail(
          new ProbeFailed({ message: `${key}'s reader did not refuse ${variableOf(key)} set but empty: ${detail}` }),
        )
      }
      return Effect.succeed(refused[1] === undefined ? Option.none() : Option.some(JSON.parse(refused[1]) as string))
    }),
  )
}

// ---------------------------------------------------------------------------------------------
// The keys the code declares

const sources = (dir: string): ReadonlyArray<string> =>
  readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => join(entry.parentPath, entry.name))

/**
 * Every setting `src/` declares: the literal keys given to `setting(...)` or `envName(...)`, the
 * keys of the constants modules read through (`durationBounds`, `TargetPolicyConfig.keys`,
 * `PushConfig.keys`, `SecretBox.keyName`), and `DATABASE_URL`.
 */
export const declaredKeys = (): ReadonlySet<string> => {
  const keys = new Set<string>([
    ...Object.keys(BothyConfig.durationBounds),
    ...Object.values(TargetPolicyConfig.keys),
    ...Object.values(PushConfig.keys),
    ...Object.values(NativePushConfig.keys),
    SecretBox.keyName,
    DatabaseSchema.key,
  ])
  for (const file of sources("src")) {
    const text = readFileSync(file, "utf8")
    for (const [, key] of text.matchAll(/\b(?:setting|envName)\(\s*"([a-z][a-z0-9_.]*)"/g)) keys.add(key!)
    for (const [, name] of text.matchAll(/\bvariable\(\s*"([A-Z][A-Z0-9_]*)"/g)) keys.add(name!)
  }
  return keys
}

// ---------------------------------------------------------------------------------------------
// The table

/** A Markdown table padded as Biome formats one, so that `biome check` leaves it as it is. */
export const markdownTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = header.map((h, i) => Math.max(h.length, 3, ...rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`
  return [line(header), `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`, ...rows.map(line)].join("\n")
}

/** The table as docs/configuration.md should hold it. */
export const generate: Effect.Effect<string, ProbeFailed> = Effect.gen(function* () {
  const rows: Array<ReadonlyArray<string>> = []
  for (const [key, meaning] of meanings) {
    const fallback = yield* defaultOf(key)
    rows.push([
      plain.has(key) ? "—" : `\`${key}\``,
      `\`${variableOf(key)}\``,
      Option.match(fallback, { onNone: () => "unset", onSome: (d) => (d === "" ? "unset" : `\`${d}\``) }),
      meaning,
    ])
  }
  return markdownTable(["key", "variable", "default", "meaning"], rows)
})

export const file = join(root, "docs", "configuration.md")
export const begin = "<!-- config-table:begin -->"
export const end = "<!-- config-table:end -->"

/** The generated block of `markdown` (between the markers), or `undefined` without them. */
export const currentBlock = (markdown: string): string | undefined => {
  const from = markdown.indexOf(begin)
  const to = markdown.indexOf(end)
  return from < 0 || to < from ? undefined : markdown.slice(from + begin.length, to).trim()
}

/** `markdown` with `table` between the markers. */
export const withBlock = (markdown: string, table: string): string => {
  const from = markdown.indexOf(begin)
  const to = markdown.indexOf(end)
  if (from < 0 || to < from) throw new ProbeFailed({ message: `${file} has no ${begin} ... ${end} block` })
  return `${markdown.slice(0, from + begin.length)}\n${table}\n${markdown.slice(to)}`
}

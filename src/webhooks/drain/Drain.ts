/**
 * What every part of a drainer shares, built once per drain job kind (`WebhookDrainer.makeWith`):
 * the options resolved to numbers, the database and the log, `Permissions`, the webhook settings,
 * the operator's throttled warnings and the endpoints' OAuth2 tokens. The drainer's functions take
 * it as their first argument instead
 * of closing over all of it.
 */
import { Duration, Effect } from "effect"
import { SqlClient, type Statement } from "effect/sql"
import { Permissions, type PermissionsShape, webhookDeliver } from "../../authz/Permissions.ts"
import { EventLog } from "../../log/EventLog.ts"
import * as ThrottledWarnings from "../../platform/ThrottledWarnings.ts"
import { deliveryDefaults, WebhookConfig, type WebhookSettings } from "../WebhookConfig.ts"
import * as EndpointTokens from "./EndpointTokens.ts"

export interface DrainOptions {
  /** Deliveries one run handles before it snoozes 0 to let other jobs run. Default 500. */
  readonly maxDeliveriesPerRun?: number
  /** Time after which a run snoozes 0 before its next delivery. Default 5 s (the job timeout is 1 min). */
  readonly maxRunTime?: Duration.Input
  /**
   * Pending deliveries a run reads at once at first, and again after a read that was not full.
   * Default 4. While reads come back full it doubles, up to `maxReadAhead` (see WebhookDrainer's header).
   */
  readonly readAhead?: number
  /** The most deliveries one read takes, default 64: the 2xx answers of up to this many wait for one record. */
  readonly maxReadAhead?: number
  /**
   * How long a drainer that ran dry waits, keeping its slot, for a round to report new deliveries
   * (a NOTIFY on `DrainSlot.drainChannel`) before it lets the slot go. Default 100 ms: a
   * busy subscription keeps one drainer instead of a job per round, at the price of a worker slot
   * held that long after the last delivery. 0: let go at once.
   */
  readonly linger?: Duration.Input
  /**
   * A delivery whose right and scope were read longer than this before its request is checked
   * again first. Default `WebhookConfig`'s `permissionMaxAge` (`webhook.permission_max_age`, 1 s).
   */
  readonly permissionMaxAge?: Duration.Input
  /**
   * Runs of one owner's subscriptions in flight at once in this worker; another one snoozes
   * briefly, keeping its drain slot. Default `WebhookConfig`'s `maxInFlightPerOwner` (32).
   */
  readonly maxInFlightPerOwner?: number
  /**
   * Observes each statement that put outcomes of the subscription's deliveries on record (answers,
   * deliveries that went dead without a request, a disable): tests wait on it instead of polling.
   */
  readonly onRecorded?: (subscriptionId: string) => Effect.Effect<void>
  /**
   * Observes each wait of a rate-limited subscription for its next request's turn (`DrainPace`),
   * once the wait has begun: tests move the `TestClock` on it. Long waits are snoozes instead.
   */
  readonly onPaced?: (subscriptionId: string, wait: Duration.Duration) => Effect.Effect<void>
}

export interface Drain {
  readonly sql: SqlClient.SqlClient
  /** The log operational events are appended to (`OperationalEvents`), in the drainer's transactions. */
  readonly log: EventLog["Service"]
  readonly permissions: PermissionsShape
  /**
   * The owner's right on a pending delivery's space as a column of the statement that reads it,
   * when `Permissions` gives it as SQL; NULL otherwise, and `allowedEach` answers after the read.
   */
  readonly allowedColumn: Statement.Fragment
  readonly config: WebhookSettings
  readonly maxDeliveries: number
  readonly maxRunMillis: number
  readonly readAhead: number
  readonly maxReadAhead: number
  readonly linger: Duration.Duration
  /** `linger` is above zero: a run that ran dry waits for news before it lets go. */
  readonly lingers: boolean
  readonly maxAgeMillis: number
  readonly maxInFlightPerOwner: number
  readonly onRecorded: (subscriptionId: string) => Effect.Effect<void>
  readonly onPaced: ((subscriptionId: string, wait: Duration.Duration) => Effect.Effect<void>) | undefined
  /** Once a minute per subscription at most. */
  readonly warn: (subscriptionId: string, message: string) => Effect.Effect<void>
  /** The OAuth2 tokens of endpoints that want one, shared by every run of this worker. */
  readonly tokens: EndpointTokens.EndpointTokens
}

const millis = (input: Duration.Input) => Duration.toMillis(Duration.fromInputUnsafe(input))

/** `Drain.allowedColumn` for `permissions`: its SQL answer on `s.owner` and `e.space_id`, or NULL. */
export const allowedColumn = (sql: SqlClient.SqlClient, permissions: PermissionsShape): Statement.Fragment =>
  permissions.inSql === undefined
    ? sql.literal("NULL::boolean")
    : permissions.inSql({ principal: sql.literal("s.owner"), spaceId: sql.literal("e.space_id") }, webhookDeliver)

export const make = (options: DrainOptions) =>
  Effect.gen(function* () {
    const config = yield* WebhookConfig
    const readAhead = Math.max(1, options.readAhead ?? 4)
    const linger = Duration.fromInputUnsafe(options.linger ?? Duration.millis(100))
    const sql = yield* SqlClient.SqlClient
    const permissions = yield* Permissions
    return {
      sql,
      log: yield* EventLog,
      permissions,
      allowedColumn: allowedColumn(sql, permissions),
      config,
      maxDeliveries: options.maxDeliveriesPerRun ?? 500,
      maxRunMillis: millis(options.maxRunTime ?? Duration.seconds(5)),
      readAhead,
      maxReadAhead: Math.max(readAhead, options.maxReadAhead ?? 64),
      linger,
      lingers: Duration.isGreaterThan(linger, Duration.zero),
      maxAgeMillis: millis(options.permissionMaxAge ?? config.permissionMaxAge ?? deliveryDefaults.permissionMaxAge),
      maxInFlightPerOwner:
        options.maxInFlightPerOwner ?? config.maxInFlightPerOwner ?? deliveryDefaults.maxInFlightPerOwner,
      onRecorded: options.onRecorded ?? (() => Effect.void),
      onPaced: options.onPaced,
      warn: ThrottledWarnings.make(Duration.minutes(1)),
      tokens: EndpointTokens.make(),
    } satisfies Drain
  })

/** Runs `effect` with the drainer's own database client and log (the modules that take them from the context). */
export const withSql = <A, E, R>(drain: Drain, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.provideService(SqlClient.SqlClient, drain.sql), Effect.provideService(EventLog, drain.log))

/**
 * How many pending deliveries the next read asks for, after one that asked `asked` and got `got`,
 * when the last request took `lastRequestMillis`: double while reads come back full, back to
 * `readAhead` after one that was not, and never more than can go out within half the age bound
 * at the endpoint's last pace (the rest would be read again anyway).
 */
export const nextSize = (
  drain: Pick<Drain, "readAhead" | "maxReadAhead" | "maxAgeMillis">,
  lastRequestMillis: number | undefined,
  asked: number,
  got: number,
): number => {
  const grown = got < asked ? drain.readAhead : Math.min(drain.maxReadAhead, asked * 2)
  return lastRequestMillis === undefined
    ? grown
    : Math.min(grown, Math.max(1, Math.floor(drain.maxAgeMillis / (2 * Math.max(1, lastRequestMillis)))))
}

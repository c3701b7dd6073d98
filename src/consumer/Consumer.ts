/**
 * A consumer of the event log: a named, durable cursor whose rounds (see `ConsumerRound`) turn
 * events into jobs exactly once, woken by the `event_log` NOTIFY, by every LISTEN reconnect, and by
 * its poll interval regardless. After a wake-up it runs rounds back to back until one reads less
 * than a full batch.
 *
 * With a `cooldown`, wake-ups start rounds at most that often: a wake-up while one is still
 * cooling waits for its end, and every wake-up in between is served by that one. Under a steady
 * stream of appends (a NOTIFY each) this turns a round per event or two into a round per batch of
 * events, and hands each receiver its work in batches (River's fetch cooldown is the same idea).
 * An idle consumer is woken at once, and catching up (full batches) is never slowed.
 *
 * A consumer stopped for longer than `sync.event_retention` loses the events retention removed in
 * the meantime: its loss handler gets each lost range, inside the round that finds it.
 *
 * The consumer names that exist are the rows of `event_consumer_cursors`, fixed by migrations; a
 * layer for a name without a row fails at start.
 */
import { Clock, Duration, Effect, Layer, Metric, Option, Queue, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { EventLog, channel as eventLogChannel } from "../log/EventLog.ts"
import { NotificationStream } from "../platform/NotificationStream.ts"
import * as ConsumerMetrics from "./ConsumerMetrics.ts"
import * as ConsumerRound from "./ConsumerRound.ts"

export type { FanOutJob, LostRange, RoundOutcome } from "./ConsumerRound.ts"

export class ConsumerNotRegistered extends Schema.TaggedError<ConsumerNotRegistered>()("ConsumerNotRegistered", {
  name: Schema.String,
  registered: Schema.Array(Schema.String),
}) {
  override get message() {
    return `consumer "${this.name}" has no row in event_consumer_cursors (registered: ${this.registered.join(", ") || "none"}); a consumer is added by a migration that inserts its cursor at the head`
  }
}

export interface ConsumerOptions<E, R> extends ConsumerRound.RoundOptions<E, R> {
  readonly pollInterval: Duration.Input
  /**
   * The least time from the start of one wake-up's rounds to the start of the next (see the
   * header). Default 0: every wake-up is served as soon as the last one is done.
   */
  readonly cooldown?: Duration.Input | undefined
  /** How often the lag gauges are sampled between rounds. Default 10 seconds. */
  readonly sampleInterval?: Duration.Input
  /** Observes every round's outcome (failures included), e.g. for tests that wait on a round. */
  readonly onRound?: (outcome: ConsumerRound.RoundOutcome | { readonly _tag: "Failed" }) => Effect.Effect<void>
}

const gauges = (name: string) => ({
  lag: Metric.withAttributes(ConsumerMetrics.lag, { consumer: name }),
  pendingAge: Metric.withAttributes(ConsumerMetrics.pendingAge, { consumer: name }),
})

const ageSeconds = (occurredAt: Date | undefined | null) =>
  occurredAt == null
    ? Effect.succeed(0)
    : Effect.map(Clock.currentTimeMillis, (now) => Math.max(0, (now - occurredAt.getTime()) / 1000))

/**
 * Reads lag and pending age from the database and sets the consumer's gauges: the first event
 * after the cursor, read as a round reads (`EventLog.readFrom`, its bounds parameters, so only the
 * leaves that can hold it are planned).
 */
export const sampleGauges = Effect.fn("Consumer.sampleGauges")(function* (name: string) {
  const sql = yield* SqlClient.SqlClient
  const log = yield* EventLog
  const position = yield* log.readFrom(
    sql`SELECT last_seq, last_at FROM event_consumer_cursors WHERE name = ${name}`,
    1,
  )
  if (Option.isNone(position)) return
  const { after, head, events } = position.value
  const g = gauges(name)
  yield* Metric.update(g.lag, Number(head.seq - after))
  yield* Metric.update(g.pendingAge, yield* ageSeconds(events[0]?.occurredAt))
})

const record = (name: string, outcome: ConsumerRound.RoundOutcome) =>
  Effect.gen(function* () {
    yield* Metric.update(Metric.withAttributes(ConsumerMetrics.rounds, { consumer: name, outcome: outcome._tag }), 1)
    if (outcome._tag === "Locked") return
    const g = gauges(name)
    if (outcome._tag === "CaughtUp") {
      yield* Metric.update(g.lag, 0)
      yield* Metric.update(g.pendingAge, 0)
      return
    }
    yield* Metric.update(Metric.withAttributes(ConsumerMetrics.events, { consumer: name }), outcome.events)
    const lost = outcome.lost.reduce((n, r) => n + Number(r.lastSeq - r.firstSeq + 1n), 0)
    if (lost > 0) yield* Metric.update(Metric.withAttributes(ConsumerMetrics.lost, { consumer: name }), lost)
    yield* Metric.update(g.lag, Number(outcome.head.seq - outcome.toSeq))
    yield* Metric.update(g.pendingAge, yield* ageSeconds(outcome.nextOccurredAt))
  })

/** The consumer's counters at 0, so that `rate()` and `increase()` see their first events. */
const startCounters = (name: string) =>
  Effect.gen(function* () {
    yield* Metric.update(Metric.withAttributes(ConsumerMetrics.events, { consumer: name }), 0)
    yield* Metric.update(Metric.withAttributes(ConsumerMetrics.lost, { consumer: name }), 0)
  })

/** Fails with `ConsumerNotRegistered` unless the consumer's cursor row exists. */
export const checkRegistered = Effect.fn("Consumer.checkRegistered")(function* (name: string) {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ name: string }>`SELECT name FROM event_consumer_cursors ORDER BY name`
  if (!rows.some((r) => r.name === name)) {
    return yield* new ConsumerNotRegistered({ name, registered: rows.map((r) => r.name) })
  }
})

/** The round of a consumer, with its metrics: for tests, tools and hosts that drive rounds. */
export const makeRound = Effect.fnUntraced(function* <E, R>(options: ConsumerRound.RoundOptions<E, R>) {
  const round = yield* ConsumerRound.make(options)
  return round.pipe(Effect.tap((outcome) => record(options.name, outcome)))
})

/**
 * Takes wake-ups from `wake` forever and serves each with `serve`, starting at most once per
 * `cooldown`: a wake-up that comes while the last serving is still cooling waits for its end (see
 * the module header).
 */
export const serveWakeUps = <E, R>(
  wake: Queue.Dequeue<void>,
  serve: Effect.Effect<void, E, R>,
  cooldown: Duration.Input,
) => {
  const millis = Duration.toMillis(Duration.fromInputUnsafe(cooldown))
  const served =
    millis <= 0
      ? serve
      : Effect.gen(function* () {
          const started = yield* Clock.currentTimeMillis
          yield* serve
          const left = millis - ((yield* Clock.currentTimeMillis) - started)
          if (left > 0) yield* Effect.sleep(Duration.millis(left))
        })
  return Queue.take(wake).pipe(Effect.andThen(served), Effect.forever)
}

/** Runs a consumer for the layer's lifetime. */
export const layer = <E, R>(options: ConsumerOptions<E, R>) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const { name } = options
      yield* checkRegistered(name)
      const round = yield* makeRound(options)
      const notifications = yield* NotificationStream
      const onRound = options.onRound ?? (() => Effect.void)
      const wake = yield* Queue.sliding<void>(1)
      const poke = Queue.offer(wake, undefined).pipe(Effect.asVoid)

      yield* notifications.subscribe(eventLogChannel, () => poke)
      yield* poke.pipe(Effect.delay(options.pollInterval), Effect.forever, Effect.forkScoped)
      // Sampled once before the layer is up, so a scrape never finds the consumer's series absent.
      const sample = sampleGauges(name).pipe(
        Effect.catchCause((cause) => Effect.logWarning(`consumer ${name}: gauge sampling failed`, cause)),
      )
      yield* sample
      yield* startCounters(name)
      yield* sample.pipe(
        Effect.delay(options.sampleInterval ?? Duration.seconds(10)),
        Effect.forever,
        Effect.forkScoped,
      )

      // Back to back until a round reads less than a full batch (or finds the row locked).
      const drain = round.pipe(
        Effect.tap(onRound),
        Effect.repeat({ while: (o) => o._tag === "Processed" && o.full }),
        Effect.catchCause((cause) =>
          Effect.logError(`consumer ${name}: round failed; it is retried at the next wake-up`, cause).pipe(
            Effect.andThen(
              Metric.update(Metric.withAttributes(ConsumerMetrics.rounds, { consumer: name, outcome: "Failed" }), 1),
            ),
            Effect.andThen(onRound({ _tag: "Failed" })),
          ),
        ),
      )
      yield* poke
      yield* serveWakeUps(wake, drain, options.cooldown ?? Duration.zero).pipe(Effect.forkScoped)
    }).pipe(Effect.annotateLogs({ consumer: options.name })),
  )

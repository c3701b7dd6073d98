/**
 * One LISTEN connection per process, shared by every consumer and job worker.
 *
 * NOTIFY is only a wake-up: a notification sent while nobody listens is lost, and a LISTEN
 * connection can die silently. So subscribers are woken both by notifications and by every
 * (re)connect, after which they catch up from their durable state; their poll interval covers the
 * rest. A lost connection is re-established with capped exponential backoff.
 *
 *   connect -> LISTEN every channel -> wake every subscriber -> deliver ... -> lost -> backoff -> connect
 */
import { PgClient, PgConnection } from "@effect/sql-pg"
import { Cause, Context, type Duration, Effect, Layer, Option, Queue, Ref, Schedule, type Scope } from "effect"

export type Wake =
  /** A notification on the channel, with its payload. */
  | { readonly _tag: "Notified"; readonly payload: string }
  /** The listener (re)connected: anything may have been committed while it was away. */
  | { readonly _tag: "Connected" }

type Handler = (wake: Wake) => Effect.Effect<void>

/**
 * One line at warn (a lost connection is expected now and then, and retried), the whole cause at
 * debug: a server that goes away would otherwise print a stack trace at every reconnect attempt.
 */
const logLoss = (what: string, cause: Cause.Cause<unknown>) =>
  Effect.logWarning(`${what} (${reasons(Cause.squash(cause))})`).pipe(Effect.andThen(Effect.logDebug(what, cause)))

/** The distinct messages along an error's causes (an `SqlError` keeps PostgreSQL's under `reason`). */
const reasons = (error: unknown): string => {
  const seen: Array<string> = []
  let e: unknown = error
  for (let depth = 0; depth < 6 && e !== null && typeof e === "object"; depth++) {
    const message = "message" in e && typeof e.message === "string" ? e.message : undefined
    if (message !== undefined && !seen.some((m) => m.includes(message))) seen.push(message)
    e = "cause" in e && e.cause !== undefined ? e.cause : "reason" in e ? e.reason : undefined
  }
  return seen.join(": ") || String(error)
}

export class NotificationStream extends Context.Service<
  NotificationStream,
  {
    /**
     * Calls `handler` for each notification on `channel` and after each (re)connect, for the
     * lifetime of the scope; a subscriber that arrives while connected gets `Connected` at once.
     * Handlers must not block: offer to a sliding queue and return.
     */
    readonly subscribe: (channel: string, handler: Handler) => Effect.Effect<void, never, Scope.Scope>
    /** The listening backend's pid while connected (tests terminate it; operators look for it). */
    readonly backendPid: Effect.Effect<Option.Option<number>>
  }
>()("bothy/NotificationStream") {
  /** Listens on `channels` (fixed for the process: LISTEN happens on connect). */
  static readonly layer = (
    channels: ReadonlyArray<string> = ["event_log", "jobs", "webhook_drains"],
    reconnect: { readonly base: Duration.Input; readonly cap: Duration.Input } = {
      base: "50 millis",
      cap: "5 seconds",
    },
  ) =>
    Layer.effect(
      NotificationStream,
      Effect.gen(function* () {
        const pg = yield* PgClient.PgClient
        const handlers = new Map<string, Set<Handler>>(channels.map((c) => [c, new Set()]))
        const pid = yield* Ref.make(Option.none<number>())

        const dispatch = (channel: string, wake: Wake) =>
          Effect.forEach(handlers.get(channel) ?? [], (h) => h(wake), { discard: true })

        const session = Effect.scoped(
          Effect.gen(function* () {
            const socket = yield* PgConnection.make({ ...pg.config, applicationName: "bothy-listen" })
            // Every LISTEN shares this one pinned connection (re-pinning a pinned view is a no-op;
            // listening on the bare connection would queue each channel behind the previous pin).
            const connection = yield* socket.pin
            const queues = yield* Effect.forEach(channels, (c) =>
              Effect.map(connection.listen(c), (q) => [c, q] as const),
            )
            yield* Ref.set(pid, Option.some(connection.processId))
            yield* Effect.forEach(channels, (c) => dispatch(c, { _tag: "Connected" }), { discard: true })
            // Each channel drains its own queue; the first failure (the connection died) ends the
            // session, which then counts as a success: the next connect is immediate, and backoff
            // applies only to connects that fail.
            yield* Effect.raceAll(
              queues.map(([channel, queue]) =>
                Queue.take(queue).pipe(
                  Effect.flatMap((n) => dispatch(channel, { _tag: "Notified", payload: n.payload })),
                  Effect.forever,
                ),
              ),
            ).pipe(Effect.catchCause((cause) => logLoss("LISTEN connection lost; reconnecting", cause)))
          }).pipe(Effect.ensuring(Ref.set(pid, Option.none()))),
        )

        yield* session.pipe(
          Effect.tapCause((cause) => logLoss("LISTEN connection failed", cause)),
          Effect.retry(
            Schedule.min([Schedule.exponential(reconnect.base), Schedule.spaced(reconnect.cap)]).pipe(
              Schedule.jittered,
            ),
          ),
          Effect.forever,
          Effect.forkScoped,
        )

        const subscribe = (channel: string, handler: Handler) =>
          Effect.acquireRelease(
            Effect.suspend(() => {
              const set = handlers.get(channel)
              if (set === undefined) return Effect.die(`NotificationStream does not listen on "${channel}"`)
              set.add(handler)
              return Effect.flatMap(Ref.get(pid), (p) =>
                Option.isSome(p) ? handler({ _tag: "Connected" }) : Effect.void,
              )
            }),
            () => Effect.sync(() => handlers.get(channel)?.delete(handler)),
          )

        return NotificationStream.of({ subscribe, backendPid: Ref.get(pid) })
      }),
    )
}

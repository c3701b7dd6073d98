/**
 * One LISTEN connection per process, shared by every consumer and job worker; it listens on the
 * channels its subscribers name, each from its first subscription on.
 *
 * NOTIFY is only a wake-up: a notification sent while nobody listens is lost, and a LISTEN
 * connection can die silently. So subscribers are woken both by notifications and by every
 * (re)connect, after which they catch up from their durable state; their poll interval covers the
 * rest. A lost connection is re-established with capped exponential backoff.
 *
 *   connect -> probe heard -> LISTEN every subscribed channel -> wake every subscriber -> deliver ... -> lost -> backoff -> connect
 *                 unheard -> poll-only: wake every subscriber once, no more connects
 *
 * No lost wake-up between a subscription and its LISTEN: subscriptions and connects take turns
 * (one lock). A subscription while connected returns once its channel is listened to (LISTEN is
 * confirmed), and only then wakes its subscriber with `Connected`; one while disconnected returns
 * at once, and the next connect listens on its channel before it wakes every subscriber.
 *
 * The connection is also the process's sign of life (`sessions`): it is open for the process's
 * whole life, and PostgreSQL drops it the moment the process dies, so other processes can tell a
 * dead process from a slow one by looking for its backend in `pg_stat_activity` (the job runtime
 * does, `JobLiveness`). Each connect reads its backend (`ListenBackend`: none behind a pooler).
 *
 * It never pretends to listen. The connection goes where sessions of their own go
 * (`DatabaseSessions`: `DATABASE_DIRECT_URL`, or `DATABASE_URL` when no transaction pooler stands
 * in between), and each one proves it hears a NOTIFY sent from the pool (`NotifyProbe`) before
 * anyone is told it listens. Where there is nowhere to listen, or a probe goes unheard, the stream
 * turns poll-only for the process's life and says so in one line: every subscriber is woken once
 * (so it catches up) and from then on only its poll interval wakes it.
 */
import { PgClient, PgConnection } from "@effect/sql-pg"
import { Cause, Context, Deferred, Duration, Effect, Layer, Option, Queue, Schedule, Scope, Semaphore } from "effect"
import { DatabaseSessions, type SessionTarget } from "./DatabaseSessions.ts"
import { type Backend, backendOf } from "./ListenBackend.ts"
import * as NotifyProbe from "./NotifyProbe.ts"

export type Wake =
  /** A notification on the channel, with its payload. */
  | { readonly _tag: "Notified"; readonly payload: string }
  /** The listener (re)connected: anything may have been committed while it was away. */
  | { readonly _tag: "Connected" }

type Handler = (wake: Wake) => Effect.Effect<void>

export type SessionEvent =
  /** Connected and listening; `backend` is none when a pooler stands in between. */
  | { readonly _tag: "Connected"; readonly backend: Option.Option<Backend> }
  /** The connection is gone (or abandoned); a new one follows. */
  | { readonly _tag: "Lost" }

export type { Backend }

type SessionHandler = (event: SessionEvent) => Effect.Effect<void>

/** How subscribers are woken, as settled by the first connection (or at once, when there is nowhere to listen). */
export type Wakeups =
  /** LISTEN heard its probe over the connection `variable` names. */
  | { readonly _tag: "Notify"; readonly variable: string }
  /** No LISTEN: only each subscriber's poll interval wakes it; `reason` is the line that said so. */
  | { readonly _tag: "PollOnly"; readonly reason: string }

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

/** A live connection: its channels and how it ends. */
interface Session {
  readonly connection: PgConnection.PgConnection
  /** Where the LISTEN queues and their readers live: closed with the connection. */
  readonly scope: Scope.Scope
  readonly listening: Set<string>
  /** Fails when a queue fails or a LISTEN does (the connection is gone), or when it is abandoned. */
  readonly lost: Deferred.Deferred<never, unknown>
  readonly backend: Option.Option<Backend>
}

/** The process's subscriptions and its connection while it is live. */
interface Registry {
  readonly handlers: Map<string, Set<Handler>>
  readonly sessionHandlers: Set<SessionHandler>
  live: Session | undefined
  /**
   * Held by a subscription while it adds its channel, and by a connect from its LISTENs to its
   * wake-ups: so no channel is added in between, unlistened and unwoken.
   */
  readonly turn: Semaphore.Semaphore
  /** Settled once, by the first probe (or at once); poll-only for good once it says so. */
  readonly wakeups: Deferred.Deferred<Wakeups>
  pollOnly: boolean
}

/** PostgreSQL's limit for a channel name (NAMEDATALEN - 1 bytes). */
const maxChannelBytes = 63

const dispatch = (registry: Registry, channel: string, wake: Wake) =>
  Effect.forEach(registry.handlers.get(channel) ?? [], (h) => h(wake), { discard: true })

const dispatchSession = (registry: Registry, event: SessionEvent) =>
  Effect.forEach(registry.sessionHandlers, (h) => h(event), { discard: true })

/** LISTENs on `channel` in `session` and reads its queue there; a failure ends the session. */
const listen = (registry: Registry, session: Session, channel: string) =>
  session.connection.listen(channel).pipe(
    Scope.provide(session.scope),
    Effect.tapError((error) => Deferred.fail(session.lost, error)),
    Effect.flatMap((queue) =>
      Queue.take(queue).pipe(
        Effect.flatMap((n) => dispatch(registry, channel, { _tag: "Notified", payload: n.payload })),
        Effect.forever,
        Effect.catchCause((cause) => Deferred.failCause(session.lost, cause)),
        Effect.forkIn(session.scope),
      ),
    ),
    Effect.andThen(Effect.sync(() => session.listening.add(channel))),
  )

/** Turns the stream poll-only for good: one line, every subscriber woken once, a session of none. */
const pollOnly = (registry: Registry, reason: string) =>
  registry.turn.withPermit(
    Effect.gen(function* () {
      registry.pollOnly = true
      yield* Effect.logWarning(`wake-ups by polling only: ${reason}`)
      yield* Deferred.succeed(registry.wakeups, { _tag: "PollOnly", reason })
      yield* Effect.forEach(registry.handlers.keys(), (c) => dispatch(registry, c, { _tag: "Connected" }), {
        discard: true,
      })
      yield* dispatchSession(registry, { _tag: "Connected", backend: Option.none() })
    }),
  )

interface Listener {
  readonly pool: PgClient.PgClient
  readonly target: SessionTarget
  readonly probeTimeout: Duration.Input
}

/** The end of a session: lost (connect again), or its probe went unheard (poll-only, no more connects). */
type Ended = "Lost" | "PollOnly"

/**
 * One connection, from connect to loss: its probe heard, LISTEN on every channel subscribed, wake
 * every subscriber, deliver.
 */
const session = (registry: Registry, listener: Listener): Effect.Effect<Ended, unknown> =>
  Effect.scoped(
    Effect.gen(function* () {
      const { pool, target, probeTimeout } = listener
      const config = Option.match(target.url, {
        onNone: () => pool.config,
        onSome: (url) => ({
          url,
          ...(target.ssl && { ssl: target.ssl }),
          ...(target.startupParameters && { startupParameters: target.startupParameters }),
        }),
      })
      const socket = yield* PgConnection.make({ ...config, applicationName: "bothy-listen" })
      // Every LISTEN shares this one pinned connection (re-pinning a pinned view is a no-op;
      // listening on the bare connection would queue each channel behind the previous pin).
      const connection = yield* socket.pin
      if (!(yield* NotifyProbe.heard(connection, pool, probeTimeout))) {
        yield* pollOnly(
          registry,
          `LISTEN over ${target.variable} did not hear its own NOTIFY within ${Duration.format(Duration.fromInputUnsafe(probeTimeout))} ` +
            `(a transaction pooler in between?); set DATABASE_DIRECT_URL to a direct connection for NOTIFY wake-ups`,
        )
        return "PollOnly"
      }
      const current: Session = {
        connection,
        scope: yield* Effect.scope,
        listening: new Set(),
        lost: yield* Deferred.make<never, unknown>(),
        backend: yield* backendOf(connection),
      }
      yield* registry.turn.withPermit(
        Effect.gen(function* () {
          const channels = Array.from(registry.handlers.keys())
          yield* Effect.forEach(channels, (c) => listen(registry, current, c), { discard: true })
          registry.live = current
          yield* Effect.forEach(channels, (c) => dispatch(registry, c, { _tag: "Connected" }), { discard: true })
          yield* dispatchSession(registry, { _tag: "Connected", backend: current.backend })
          if (yield* Deferred.succeed(registry.wakeups, { _tag: "Notify", variable: target.variable }))
            yield* Effect.logInfo(`wake-ups by NOTIFY: LISTEN over ${target.variable} heard its probe`)
        }),
      )
      // The first failure (the connection died) ends the session, which then counts as a
      // success: the next connect is immediate, and backoff applies only to connects that fail.
      yield* Deferred.await(current.lost).pipe(
        Effect.catchCause((cause) => logLoss("LISTEN connection lost; reconnecting", cause)),
        Effect.ensuring(
          Effect.suspend(() => {
            registry.live = undefined
            return dispatchSession(registry, { _tag: "Lost" })
          }),
        ),
      )
      return "Lost" as const
    }),
  )

/** Adds a subscriber (in its turn); while connected, LISTENs on its channel if nobody did yet, then wakes it. */
const add = (registry: Registry, channel: string, handler: Handler) =>
  Effect.suspend(() => {
    if (new TextEncoder().encode(channel).byteLength > maxChannelBytes) {
      return Effect.die(`NotificationStream: channel "${channel}" is longer than ${maxChannelBytes} bytes`)
    }
    const subscribers = registry.handlers.get(channel) ?? new Set()
    registry.handlers.set(channel, subscribers)
    subscribers.add(handler)
    // Nothing will ever listen: woken once, it catches up; its poll does the rest.
    if (registry.pollOnly) return handler({ _tag: "Connected" })
    const current = registry.live
    if (current === undefined) return Effect.void
    return (current.listening.has(channel) ? Effect.void : listen(registry, current, channel)).pipe(
      Effect.andThen(handler({ _tag: "Connected" })),
      // The connection failed under the LISTEN: the next one listens and wakes the handler.
      Effect.catch(() => Effect.void),
    )
  })

const remove = (registry: Registry, channel: string, handler: Handler) =>
  Effect.sync(() => {
    const subscribers = registry.handlers.get(channel)
    subscribers?.delete(handler)
    // The session keeps listening; the next one no longer does.
    if (subscribers?.size === 0) registry.handlers.delete(channel)
  })

export class NotificationStream extends Context.Service<
  NotificationStream,
  {
    /**
     * Calls `handler` for each notification on `channel` and after each (re)connect, for the
     * lifetime of the scope. A subscriber that arrives while connected gets `Connected` once its
     * channel is listened to, before this returns: a NOTIFY sent after it returns reaches it.
     * Handlers must not block: offer to a sliding queue and return.
     */
    readonly subscribe: (channel: string, handler: Handler) => Effect.Effect<void, never, Scope.Scope>
    /** The listening backend's pid while connected (tests terminate it; operators look for it). */
    readonly backendPid: Effect.Effect<Option.Option<number>>
    /**
     * Calls `handler` with `Connected` (at once when connected now, and after each connect) and
     * `Lost` (as soon as the connection is gone, before the next connect), for the lifetime of the
     * scope. Handlers must not block.
     */
    readonly sessions: (handler: SessionHandler) => Effect.Effect<void, never, Scope.Scope>
    /**
     * Ends the session on `backend` if it is the current one (another connection learned that
     * PostgreSQL no longer has it, while this socket has not heard), so that a new one is made.
     */
    readonly abandon: (backend: Backend) => Effect.Effect<void>
    /** How subscribers are woken, once the first connection settled it (`Wakeups`). */
    readonly wakeups: Effect.Effect<Wakeups>
  }
>()("bothy/NotificationStream") {
  static readonly layer = (
    reconnect: { readonly base: Duration.Input; readonly cap: Duration.Input } = {
      base: "50 millis",
      cap: "5 seconds",
    },
    /** How long a connection's probe waits for its NOTIFY (`NotifyProbe`). */
    probeTimeout: Duration.Input = NotifyProbe.defaultTimeout,
  ) =>
    Layer.effect(
      NotificationStream,
      Effect.gen(function* () {
        const pg = yield* PgClient.PgClient
        const registry: Registry = {
          handlers: new Map(),
          sessionHandlers: new Set(),
          live: undefined,
          turn: yield* Semaphore.make(1),
          wakeups: yield* Deferred.make<Wakeups>(),
          pollOnly: false,
        }
        const { route, session: target } = yield* DatabaseSessions
        if (Option.isNone(target)) {
          const at = route._tag === "Pooler" ? ` at ${route.at}` : ""
          yield* pollOnly(
            registry,
            `DATABASE_URL goes through a transaction pooler${at}, which cannot carry LISTEN; ` +
              `set DATABASE_DIRECT_URL to a direct connection for NOTIFY wake-ups`,
          )
        } else {
          yield* session(registry, { pool: pg, target: target.value, probeTimeout }).pipe(
            Effect.tapCause((cause) => logLoss("LISTEN connection failed", cause)),
            Effect.retry(
              Schedule.min([Schedule.exponential(reconnect.base), Schedule.spaced(reconnect.cap)]).pipe(
                Schedule.jittered,
              ),
            ),
            Effect.repeat({ until: (ended) => ended === "PollOnly" }),
            Effect.forkScoped,
          )
        }
        return NotificationStream.of({
          subscribe: (channel, handler) =>
            Effect.acquireRelease(registry.turn.withPermit(add(registry, channel, handler)), () =>
              remove(registry, channel, handler),
            ),
          backendPid: Effect.sync(() =>
            registry.live === undefined ? Option.none() : Option.some(registry.live.connection.processId),
          ),
          sessions: (handler) =>
            Effect.acquireRelease(
              registry.turn.withPermit(
                Effect.suspend(() => {
                  registry.sessionHandlers.add(handler)
                  const current = registry.live
                  if (registry.pollOnly) return handler({ _tag: "Connected", backend: Option.none() })
                  return current === undefined ? Effect.void : handler({ _tag: "Connected", backend: current.backend })
                }),
              ),
              () => Effect.sync(() => registry.sessionHandlers.delete(handler)),
            ),
          wakeups: Deferred.await(registry.wakeups),
          abandon: (backend) =>
            Effect.suspend(() => {
              const current = registry.live
              if (current === undefined || Option.isNone(current.backend)) return Effect.void
              const { pid, started } = current.backend.value
              return pid === backend.pid && started === backend.started
                ? Deferred.fail(current.lost, `PostgreSQL no longer has backend ${pid}`).pipe(Effect.asVoid)
                : Effect.void
            }),
        })
      }),
    )
}

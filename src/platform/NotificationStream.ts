/**
 * One LISTEN connection per process, shared by every consumer and job worker; it listens on the
 * channels its subscribers name, each from its first subscription on.
 *
 * NOTIFY is only a wake-up: a notification sent while nobody listens is lost, and a LISTEN
 * connection can die silently. So subscribers are woken both by notifications and by every
 * (re)connect, after which they catch up from their durable state; their poll interval covers the
 * rest. A lost connection is re-established with capped exponential backoff.
 *
 *   connect -> LISTEN every subscribed channel -> wake every subscriber -> deliver ... -> lost -> backoff -> connect
 *
 * No lost wake-up between a subscription and its LISTEN: subscriptions and connects take turns
 * (one lock). A subscription while connected returns once its channel is listened to (LISTEN is
 * confirmed), and only then wakes its subscriber with `Connected`; one while disconnected returns
 * at once, and the next connect listens on its channel before it wakes every subscriber.
 *
 * The connection is also the process's sign of life (`sessions`): it is open for the process's
 * whole life, and PostgreSQL drops it the moment the process dies, so other processes can tell a
 * dead process from a slow one by looking for its backend in `pg_stat_activity` (the job runtime
 * does, `JobLiveness`). Each connect reads its backend's pid and `backend_start` (a pid alone can be
 * reused); when the pid PostgreSQL reports is not the one the connection got at start-up, a pooler
 * stands in between (PgBouncer, Supavisor and RDS Proxy hand out keys of their own), whose server
 * connections outlive their clients, and the backend is reported as unknown.
 */
import { PgClient, PgConnection } from "@effect/sql-pg"
import {
  Cause,
  Context,
  Deferred,
  type Duration,
  Effect,
  Layer,
  Option,
  Queue,
  Schedule,
  Scope,
  Semaphore,
} from "effect"

export type Wake =
  /** A notification on the channel, with its payload. */
  | { readonly _tag: "Notified"; readonly payload: string }
  /** The listener (re)connected: anything may have been committed while it was away. */
  | { readonly _tag: "Connected" }

type Handler = (wake: Wake) => Effect.Effect<void>

/**
 * A PostgreSQL backend as `pg_stat_activity` shows it: its pid and when it started (ISO 8601 in
 * UTC, to the microsecond, as PostgreSQL keeps it), which together never name another backend.
 */
export interface Backend {
  readonly pid: number
  readonly started: string
}

export type SessionEvent =
  /** Connected and listening; `backend` is none when a pooler stands in between. */
  | { readonly _tag: "Connected"; readonly backend: Option.Option<Backend> }
  /** The connection is gone (or abandoned); a new one follows. */
  | { readonly _tag: "Lost" }

type SessionHandler = (event: SessionEvent) => Effect.Effect<void>

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
}

/** PostgreSQL's limit for a channel name (NAMEDATALEN - 1 bytes). */
const maxChannelBytes = 63

const dispatch = (registry: Registry, channel: string, wake: Wake) =>
  Effect.forEach(registry.handlers.get(channel) ?? [], (h) => h(wake), { discard: true })

const dispatchSession = (registry: Registry, event: SessionEvent) =>
  Effect.forEach(registry.sessionHandlers, (h) => h(event), { discard: true })

/** The connection's backend as `pg_stat_activity` shows it; none when the pid is not the start-up one (a pooler). */
const backendOf = (connection: PgConnection.PgConnection) =>
  connection
    .query(
      `SELECT pid, to_char(backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS started
       FROM pg_stat_activity WHERE pid = pg_backend_pid()`,
    )
    .pipe(
      Effect.map((result): Option.Option<Backend> => {
        const row = result.rows[0]
        const pid = Number(row?.pid)
        const started = row?.started
        return pid === connection.processId && typeof started === "string"
          ? Option.some({ pid, started })
          : Option.none()
      }),
    )

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

/** One connection, from connect to loss: LISTEN on every channel subscribed, wake every subscriber, deliver. */
const session = (registry: Registry, config: PgClient.PgClientConfig) =>
  Effect.scoped(
    Effect.gen(function* () {
      const socket = yield* PgConnection.make({ ...config, applicationName: "bothy-listen" })
      // Every LISTEN shares this one pinned connection (re-pinning a pinned view is a no-op;
      // listening on the bare connection would queue each channel behind the previous pin).
      const connection = yield* socket.pin
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
  }
>()("bothy/NotificationStream") {
  static readonly layer = (
    reconnect: { readonly base: Duration.Input; readonly cap: Duration.Input } = {
      base: "50 millis",
      cap: "5 seconds",
    },
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
        }
        yield* session(registry, pg.config).pipe(
          Effect.tapCause((cause) => logLoss("LISTEN connection failed", cause)),
          Effect.retry(
            Schedule.min([Schedule.exponential(reconnect.base), Schedule.spaced(reconnect.cap)]).pipe(
              Schedule.jittered,
            ),
          ),
          Effect.forever,
          Effect.forkScoped,
        )
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
                  return current === undefined ? Effect.void : handler({ _tag: "Connected", backend: current.backend })
                }),
              ),
              () => Effect.sync(() => registry.sessionHandlers.delete(handler)),
            ),
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

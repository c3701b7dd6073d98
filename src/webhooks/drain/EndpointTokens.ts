/**
 * The OAuth2 tokens of the subscriptions whose endpoints want one, kept per worker process and
 * per credential (subscription, token URL, client id, sealed secret, scope: a changed credential
 * is another key, so its old token is never sent again).
 *
 * What it keeps true:
 * - One token request at a time per credential (single-flight): every delivery asking while one
 *   is out waits for it, and a kept token is reused until `refreshBefore` its expiry, by `Clock`.
 *   So a busy subscription costs one token request per token lifetime, never one per delivery.
 * - A refresh after a 401 (`stale`) replaces only the token that got it: a caller holding a token
 *   another caller already replaced gets the new one without asking the server again.
 * - The request runs in a fiber of its own, so a delivery interrupted while waiting (a shutdown,
 *   a run's time limit) neither cancels it for the others nor leaves them waiting forever; it is
 *   bounded by the sender's time limits.
 * - A failed request is not kept: the next attempt (after the drainer's retry delay) asks again.
 *
 * Tokens are kept in memory only: a restarted worker asks once more, and each worker asks for its
 * own. Entries of tokens past their expiry are dropped whenever a new request starts.
 */
import { Clock, Deferred, Effect, type Redacted } from "effect"
import type { AccessToken, OAuthTokenFailed } from "../../outbound/OAuthClientCredentials.ts"

/** How long before its expiry a token is replaced: a tenth of its lifetime, at most a minute. */
export const refreshBefore = (lifetimeMillis: number) => Math.min(60_000, Math.floor(lifetimeMillis / 10))

interface Entry {
  readonly deferred: Deferred.Deferred<Redacted.Redacted<string>, OAuthTokenFailed>
  /** Set once the request succeeded: the token, when to replace it, and when it expires. */
  kept?: { readonly token: Redacted.Redacted<string>; readonly refreshAt: number; readonly expiresAt: number }
  failed: boolean
}

export interface EndpointTokens {
  /**
   * The token for `key`: the kept one while fresh, else the one `request` fetches (shared by every
   * caller meanwhile). With `stale` (the token a 401 answered), that token is replaced first.
   */
  readonly token: (
    key: string,
    request: Effect.Effect<AccessToken, OAuthTokenFailed>,
    stale?: Redacted.Redacted<string>,
  ) => Effect.Effect<Redacted.Redacted<string>, OAuthTokenFailed>
}

const usable = (entry: Entry, now: number, stale: Redacted.Redacted<string> | undefined) =>
  !entry.failed &&
  (entry.kept === undefined || (entry.kept.refreshAt > now && (stale === undefined || entry.kept.token !== stale)))

export const make = (): EndpointTokens => {
  const entries = new Map<string, Entry>()

  const sweep = (now: number) => {
    for (const [key, entry] of entries) if (entry.kept !== undefined && entry.kept.expiresAt <= now) entries.delete(key)
  }

  const fetchInto = (entry: Entry, request: Effect.Effect<AccessToken, OAuthTokenFailed>) =>
    Effect.gen(function* () {
      const started = yield* Clock.currentTimeMillis
      const exit = yield* Effect.exit(request)
      if (exit._tag === "Success") {
        const { token, lifetimeMillis } = exit.value
        // Counted from before the request: the server's clock started no later.
        entry.kept = {
          token,
          refreshAt: started + lifetimeMillis - refreshBefore(lifetimeMillis),
          expiresAt: started + lifetimeMillis,
        }
        yield* Deferred.succeed(entry.deferred, token)
      } else {
        entry.failed = true
        yield* Deferred.failCause(entry.deferred, exit.cause)
      }
    })

  const token: EndpointTokens["token"] = (key, request, stale) =>
    Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const current = entries.get(key)
      if (current !== undefined && usable(current, now, stale)) return yield* Deferred.await(current.deferred)
      sweep(now)
      const entry: Entry = { deferred: Deferred.makeUnsafe(), failed: false }
      entries.set(key, entry)
      yield* Effect.forkDetach(fetchInto(entry, request))
      return yield* Deferred.await(entry.deferred)
    })

  return { token }
}

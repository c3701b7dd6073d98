/**
 * Push registrations by kind (web push, APNs, FCM) and the most recently refreshed ones, for the
 * console's push page. The per-kind count reads the table once (one row per registration, no
 * index answers a count); the list is bounded and read newest first through
 * `push_registrations_refreshed_at`.
 */
import type { SqlClient } from "effect/sql"
import type * as NativeRegistration from "./NativeRegistration.ts"

export interface KindCount {
  readonly kind: NativeRegistration.Kind
  readonly count: number
  /** When the least recently refreshed one was last refreshed: how stale the kind gets. */
  readonly oldestRefresh: Date
}

export const byKind = (sql: SqlClient.SqlClient) => sql<KindCount>`
  SELECT kind, count(*)::int AS count, min(refreshed_at) AS "oldestRefresh"
  FROM push_registrations GROUP BY kind ORDER BY kind`

export interface RecentRegistration {
  readonly id: string
  readonly principal: string
  readonly kind: NativeRegistration.Kind
  /** A browser's push service (the endpoint's origin: the rest of it is a capability). */
  readonly service: string | null
  /** A device token's last 6 characters (the token itself addresses the device). */
  readonly tokenEnd: string | null
  readonly topic: string | null
  readonly environment: string | null
  readonly refreshedAt: Date
}

/** The `limit` registrations refreshed last, newest first. */
export const recent = (sql: SqlClient.SqlClient, limit: number) => sql<RecentRegistration>`
  SELECT id::text AS id, principal, kind, substring(endpoint FROM '^[a-z]+://[^/]+') AS service,
         right(token, 6) AS "tokenEnd", topic, environment, refreshed_at AS "refreshedAt"
  FROM push_registrations ORDER BY refreshed_at DESC, id DESC LIMIT ${limit}`

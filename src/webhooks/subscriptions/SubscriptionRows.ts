/**
 * The statements that write and read `webhook_subscriptions` and its scope for
 * `WebhookSubscriptions`: a create or an update is one transaction, and what the round matches
 * with is written with what it is derived from (the LIKE patterns with the names,
 * `EventTypePatterns`; the compiled `jsonpath` with the filter, `PayloadFilter`), so the two never
 * disagree. A changed filter or type list applies from the next round on: a round running while
 * the update commits matches with the row its snapshot saw.
 */
import { Effect } from "effect"
import type { SqlClient, Statement } from "effect/sql"
import * as EventLog from "../../log/EventLog.ts"
import { testEventType } from "../../log/TestEvent.ts"
import type { Columns } from "./EndpointCredentials.ts"
import { likePatterns } from "./EventTypePatterns.ts"
import { compile, type Filter } from "./PayloadFilter.ts"
import type { NewSubscription, Subscription, SubscriptionPatch } from "./SubscriptionInput.ts"
import { normalize } from "./SubscriptionOptions.ts"

/** A filter as stored: its JSON and its compiled predicate, or two NULLs. */
const filterColumns = (filter: unknown) =>
  filter === null || filter === undefined
    ? { json: null, path: null }
    : { json: JSON.stringify(filter), path: compile(filter as Filter) }

/** The subscription row and its scope, in one transaction; its cursor starts at the log's head. */
export const insertSubscription = (
  sql: SqlClient.SqlClient,
  valid: NewSubscription,
  url: URL,
  sealed: string,
  credentials: Columns,
) =>
  sql.withTransaction(
    Effect.gen(function* () {
      const filter = filterColumns(valid.filter)
      const { auth } = credentials
      const [row] = yield* sql<{ id: string }>`
        INSERT INTO webhook_subscriptions
          (owner, url, secret_sealed, event_types, type_patterns, filter, filter_path, started_seq, last_delivered_seq,
           rate_limit, headers, auth_token_url, auth_client_id, auth_client_secret_sealed, auth_scope,
           tls_client_sealed, tls_ca)
        SELECT ${valid.owner}, ${url.toString()}, ${sealed}, ${valid.eventTypes as Array<string>}::text[],
               ${likePatterns(valid.eventTypes)}::text[], ${filter.json}::jsonb, ${filter.path}::jsonpath,
               head.seq, head.seq, ${valid.rateLimit ?? null}, ${JSON.stringify(normalize(valid.headers ?? {}))}::jsonb,
               ${auth?.tokenUrl ?? null}, ${auth?.clientId ?? null}, ${auth?.secretSealed ?? null}, ${auth?.scope ?? null},
               ${credentials.tlsClientSealed ?? null}, ${credentials.tlsCa ?? null}
        FROM (SELECT ${EventLog.headSeq(sql)} AS seq) AS head
        RETURNING id::text`
      yield* insertScope(sql, row!.id, valid.scope)
      return row!.id
    }),
  )

// One array parameter, not two per space: the protocol allows 65,535 parameters at most.
const insertScope = (sql: SqlClient.SqlClient, id: string, scope: ReadonlyArray<string>) => sql`
  INSERT INTO webhook_subscription_spaces (space_id, subscription_id)
  SELECT DISTINCT unnest(${scope as Array<string>}::text[]), ${id}::uuid`

/** The patch's fields in one transaction; `false` when no such subscription. */
export const updateSubscription = (
  sql: SqlClient.SqlClient,
  id: string,
  patch: SubscriptionPatch,
  url: URL | undefined,
  credentials: Columns,
) =>
  sql.withTransaction(
    Effect.gen(function* () {
      const types = patch.eventTypes as Array<string> | undefined
      const filter = filterColumns(patch.filter)
      const { auth, tlsClientSealed, tlsCa } = credentials
      const rows = yield* sql`
        UPDATE webhook_subscriptions SET
          url = coalesce(${url?.toString() ?? null}, url),
          event_types = coalesce(${types ?? null}::text[], event_types),
          type_patterns = coalesce(${types === undefined ? null : likePatterns(types)}::text[], type_patterns),
          filter = CASE WHEN ${patch.filter !== undefined} THEN ${filter.json}::jsonb ELSE filter END,
          filter_path = CASE WHEN ${patch.filter !== undefined} THEN ${filter.path}::jsonpath ELSE filter_path END,
          rate_limit = CASE WHEN ${patch.rateLimit !== undefined} THEN ${patch.rateLimit ?? null}::float8 ELSE rate_limit END,
          headers = coalesce(${patch.headers === undefined ? null : JSON.stringify(normalize(patch.headers))}::jsonb, headers),
          ${authSet(sql, auth)},
          tls_client_sealed = CASE WHEN ${tlsClientSealed !== undefined} THEN ${tlsClientSealed ?? null} ELSE tls_client_sealed END,
          tls_ca = CASE WHEN ${tlsCa !== undefined} THEN ${tlsCa ?? null} ELSE tls_ca END
        WHERE id = ${id}::uuid RETURNING id`
      if (rows.length === 0) return false
      if (patch.scope !== undefined) {
        yield* sql`DELETE FROM webhook_subscription_spaces WHERE subscription_id = ${id}::uuid`
        yield* insertScope(sql, id, patch.scope)
      }
      return true
    }),
  )

/** The OAuth2 columns an update sets: all four together, or none when the patch leaves `auth` out. */
const authSet = (sql: SqlClient.SqlClient, auth: Columns["auth"]) =>
  auth === undefined
    ? sql`auth_token_url = auth_token_url`
    : sql`auth_token_url = ${auth?.tokenUrl ?? null}, auth_client_id = ${auth?.clientId ?? null},
          auth_client_secret_sealed = ${auth?.secretSealed ?? null}, auth_scope = ${auth?.scope ?? null}`

/** The subscriptions `where` selects, in id order, at most `limit`. */
export const selectSubscriptions = (sql: SqlClient.SqlClient, where: Statement.Fragment, limit: number) =>
  Effect.map(
    sql<Omit<Subscription, "scope"> & { scope: ReadonlyArray<string> | null }>`
      SELECT s.id::text, s.owner, s.url, s.event_types AS "eventTypes", s.filter, s.state, s.disabled_cause AS "disabledCause",
             s.degraded_at AS "degradedSince", s.started_seq AS "startedSeq", s.last_delivered_seq AS "lastDeliveredSeq",
             s.last_sequence AS "lastSequence", s.rate_limit AS "rateLimit", s.headers,
             -- Whether credentials are set, and the OAuth2 grant without its secret: nothing secret is read.
             CASE WHEN s.auth_token_url IS NOT NULL
                  THEN jsonb_build_object('type', 'oauth2', 'tokenUrl', s.auth_token_url, 'clientId', s.auth_client_id,
                                          'scope', s.auth_scope) END AS auth,
             s.tls_client_sealed IS NOT NULL AS mtls, s.tls_ca IS NOT NULL AS ca,
             (SELECT array_agg(space_id ORDER BY space_id) FROM webhook_subscription_spaces WHERE subscription_id = s.id)
               AS scope
      FROM webhook_subscriptions AS s WHERE ${where} ORDER BY s.id LIMIT ${limit}`,
    (rows): ReadonlyArray<Subscription> => rows.map((row) => ({ ...row, scope: row.scope ?? [] })),
  )

export const selectSubscription = (sql: SqlClient.SqlClient, id: string) =>
  Effect.map(selectSubscriptions(sql, sql`s.id = ${id}::uuid`, 1), (rows) => rows[0])

/**
 * Whether the subscription `s` (an alias of `webhook_subscriptions`) takes the event of type
 * `type` with payload `payload` (SQL expressions): its type patterns and its filter, and never an
 * operational event about itself (`OperationalEvents`: a `bothy.` type whose `subscription` is its
 * id), so a subscription that hears of its own trouble cannot feed it. A test event (`TestEvent`)
 * is the one exception: the subscription it names takes it, and no other. The round and a
 * re-enabling match with this one fragment.
 */
export const takesSql = (sql: SqlClient.SqlClient, s: string, type: string, payload: string) =>
  sql.literal(
    `CASE WHEN ${type} = '${testEventType}' THEN (${payload} ->> 'subscription') = ${s}.id::text ELSE ` +
      `${type} LIKE ANY (${s}.type_patterns) AND (${s}.filter_path IS NULL OR ${payload} @@ ${s}.filter_path)` +
      ` AND (${type} NOT LIKE 'bothy.%' OR (${payload} ->> 'subscription') IS DISTINCT FROM ${s}.id::text) END`,
  )

/**
 * Both sequencing modes for the tests that must hold in each (`log.sequencing`): the `EventLog`
 * layer of a mode, with a sequencer running in the background in `post_commit` mode, and the ways
 * a test waits for appends to be numbered, which are no-ops in `counter` mode.
 */
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql"
import type { NewEvent } from "../../src/log/Event.ts"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import { type LogSequencing, logSequencings } from "../../src/platform/BothyConfig.ts"
import { eventually } from "./Eventually.ts"

export const modes = logSequencings

/** `EventLog` in `mode`; in `post_commit` mode also a sequencer that polls every 2 ms. */
export const eventLog = (mode: LogSequencing): Layer.Layer<EventLog, never, SqlClient.SqlClient> =>
  mode === "counter"
    ? EventLog.layer
    : Layer.merge(EventLog.layerPostCommit, Sequencer.layer({ pollInterval: "2 millis", standbyInterval: "50 millis" }))

/** Appends and waits until the events have their seqs (at once in `counter` mode). */
export const appendSequenced = (events: ReadonlyArray<NewEvent>) =>
  Effect.flatMap(EventLog, (log) => Effect.flatMap(log.append(events), log.sequenced))

/**
 * Waits until every append committed so far has been numbered: no append waiting, in place or in
 * `event_log_pending`, at or below the highest id waiting now (the sequencer goes by id). At once
 * when nothing waits.
 */
export const settled = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [top] = yield* sql<{ id: bigint | null }>`
    SELECT greatest((SELECT max(id) FROM event_log_pending), (SELECT max(append_id) FROM event_log WHERE seq < 0)) AS id`
  if (top?.id == null) return
  const upTo = top.id
  yield* eventually(
    sql<{ n: number }>`
      SELECT ((SELECT count(*) FROM event_log_pending WHERE id <= ${upTo})
        + (SELECT count(*) FROM event_log WHERE seq < 0 AND append_id <= ${upTo}))::int AS n`,
    ([row]) => row?.n === 0,
    { what: `appends up to ${upTo} numbered`, within: "60 seconds", every: "5 millis" },
  )
}).pipe(Effect.orDie)

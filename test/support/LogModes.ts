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
 * Waits until every append committed so far has been numbered: no pending row at or below the
 * highest one pending now (the sequencer goes by id). At once when nothing is pending.
 */
export const settled = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [top] = yield* sql<{ id: bigint | null }>`SELECT max(id) AS id FROM event_log_pending`
  if (top?.id == null) return
  const upTo = top.id
  yield* eventually(
    sql<{ n: number }>`SELECT count(*)::int AS n FROM event_log_pending WHERE id <= ${upTo}`,
    ([row]) => row?.n === 0,
    { what: `appends up to ${upTo} numbered`, within: "60 seconds", every: "5 millis" },
  )
}).pipe(Effect.orDie)

/**
 * Where the in-place sequencer looks for appends it has not numbered yet: a lower bound of their
 * time (`from`, so the read prunes the log's hour leaves to the few that can hold them) and of
 * their append id (`after`, so the read starts past the index entries of what it already numbered,
 * which stay until vacuum). Both must hold for every committed append still unnumbered, or one
 * would never be numbered.
 *
 * What makes them safe: an append takes its transaction's xid, then its id, then its time, in that
 * order (see `EventLog`). A batch that numbers something writes, so it has an xid of its own, X;
 * a transaction whose xid is above X got it after X was handed out, during the batch, so its id is
 * above any id read before the batch (the last batch's read of the sequence) and its time is after
 * the batch's start. (A snapshot's `xmax` would not do: it is the latest completed xid plus one, and
 * transactions with higher xids may already be running.) After batch k, an unnumbered append is
 * one of:
 *
 *   - visible to batch k but past its limit (the batch was full): the bounds stay as they were;
 *   - invisible to it: its transaction was running (xid >= xmin_k) or had no xid yet. For the
 *     latest earlier batch j whose own xid X_j is below xmin_k, its xid is above X_j: its id is
 *     above the last id read before batch j and its time after batch j's start.
 *
 * So a batch that was not full lets the bounds move up to batch j's marks. A long transaction holds
 * them back (it holds xmin back) until it ends: the read then covers the leaves since it began, no
 * more. Time is the server's clock, and `margin` covers a clock stepped back; a sweep over every
 * leaf (`from` = none) now and then catches anything a larger step would hide.
 */
import { Duration } from "effect"

/** The bounds a batch reads within. `from` undefined: every leaf. */
export interface Bounds {
  readonly from: Date | undefined
  readonly after: bigint
}

/** What a batch reports to move the bounds on. */
export interface BatchMarks {
  readonly full: boolean
  /** Its snapshot's xmin: every xid below it had ended when the batch read. */
  readonly xmin: bigint
  /** Its own xid, when it wrote (numbered something). */
  readonly xid: bigint | undefined
  /** The batch's statement time. */
  readonly at: Date
  /** The highest append id handed out, read at the batch's end. */
  readonly lastId: bigint
}

interface Mark {
  readonly xid: bigint
  readonly at: number
  /** The last id read by the batch before this one: handed out before this one's xid. */
  readonly idBefore: bigint
}

export interface Frontier {
  readonly bounds: () => Bounds
  /** Moves the bounds on after a batch that read within `bounds()`. */
  readonly observe: (marks: BatchMarks) => void
}

/** How far back of a batch's time the bound stays, for a server clock stepped back. */
export const margin = Duration.minutes(1)

/** Marks kept at most this far apart in time while a long transaction holds the bounds back. */
const markEvery = 100

/** A frontier starting from `start` (the bounds last persisted, or none). */
export const make = (start: Bounds): Frontier => {
  let bounds = start
  let marks: Array<Mark> = []
  let lastId: bigint | undefined
  return {
    bounds: () => bounds,
    observe: ({ full, xmin, xid, at, lastId: idNow }) => {
      const time = at.getTime()
      const newest = marks.at(-1)
      if (xid !== undefined && lastId !== undefined && (newest === undefined || time - newest.at >= markEvery)) {
        marks.push({ xid, at: time, idBefore: lastId })
      }
      lastId = idNow
      if (full) return
      let usable = -1
      for (let i = 0; i < marks.length && marks[i]!.xid < xmin; i++) usable = i
      if (usable < 0) return
      const mark = marks[usable]!
      marks = marks.slice(usable)
      const from = mark.at - Duration.toMillis(margin)
      bounds = {
        from: new Date(bounds.from === undefined ? from : Math.max(from, bounds.from.getTime())),
        // biome-ignore lint/complexity/useMathMinMax: bigints, which Math.max does not take
        after: mark.idBefore > bounds.after ? mark.idBefore : bounds.after,
      }
    },
  }
}

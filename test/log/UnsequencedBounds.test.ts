/**
 * The in-place sequencer's bounds against a model of transactions: whatever the interleaving of
 * xids taken, appends, commits, rollbacks, clock steps (back by less than the margin) and batches
 * (some full, some with appends made between their snapshot and their read of the last id), every
 * append not numbered yet, committed or still open, lies within the bounds after every batch, so a
 * later batch finds it. A bound that moved past an open transaction's append fails it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import fc from "fast-check"
import * as UnsequencedBounds from "../../src/log/UnsequencedBounds.ts"

type Op =
  /** A transaction takes its xid (its first write), and appends now or later. */
  | { readonly kind: "begin"; readonly appendNow: boolean }
  /** An open transaction without its append yet appends. */
  | { readonly kind: "append"; readonly pick: number }
  | { readonly kind: "commit"; readonly pick: number }
  | { readonly kind: "rollback"; readonly pick: number }
  /** The server's clock moves, ahead or back by less than the margin. */
  | { readonly kind: "clock"; readonly millis: number }
  /**
   * A batch numbering up to `limit` appends; `before` appends begin after its snapshot and before
   * it takes its own xid (when it numbers something), `during` after that and before its read of
   * the last id.
   */
  | { readonly kind: "batch"; readonly limit: number; readonly before: number; readonly during: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant("begin" as const), appendNow: fc.boolean() }), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant("append" as const), pick: fc.nat() }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant("commit" as const), pick: fc.nat() }), weight: 4 },
  { arbitrary: fc.record({ kind: fc.constant("rollback" as const), pick: fc.nat() }), weight: 1 },
  {
    arbitrary: fc.record({
      kind: fc.constant("clock" as const),
      millis: fc.integer({ min: -Duration.toMillis(UnsequencedBounds.margin) + 1, max: 3000 }),
    }),
    weight: 3,
  },
  {
    arbitrary: fc.record({
      kind: fc.constant("batch" as const),
      limit: fc.integer({ min: 1, max: 4 }),
      before: fc.integer({ min: 0, max: 2 }),
      during: fc.integer({ min: 0, max: 2 }),
    }),
    weight: 5,
  },
)

interface Txn {
  readonly xid: number
  append?: { readonly id: number; readonly at: number }
  state: "open" | "committed" | "rolledBack" | "numbered"
}

describe("UnsequencedBounds", () => {
  it("UnsequencedBoundsHoldEveryWaitingAppend: no append waiting or yet to commit ever falls outside the bounds", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        let now = 1_000_000
        let latest = now
        const marginMillis = Duration.toMillis(UnsequencedBounds.margin)
        let nextXid = 100
        let nextId = 1
        const txns: Array<Txn> = []
        const frontier = UnsequencedBounds.make({ from: undefined, after: 0n })
        const appendTo = (t: Txn) => {
          t.append = { id: nextId++, at: now }
        }
        const begin = (appendNow: boolean) => {
          const t: Txn = { xid: nextXid++, state: "open" }
          if (appendNow) appendTo(t)
          txns.push(t)
        }
        const open = () => txns.filter((t) => t.state === "open")
        const pickOpen = (pick: number, withAppend: boolean | undefined) => {
          const candidates = open().filter((t) => withAppend === undefined || (t.append !== undefined) === withAppend)
          return candidates[pick % Math.max(1, candidates.length)]
        }
        const within = (b: UnsequencedBounds.Bounds, a: { id: number; at: number }) =>
          BigInt(a.id) > b.after && (b.from === undefined || a.at >= b.from.getTime())

        for (const o of ops) {
          if (o.kind === "begin") begin(o.appendNow)
          else if (o.kind === "append") {
            const t = pickOpen(o.pick, false)
            if (t !== undefined) appendTo(t)
          } else if (o.kind === "commit" || o.kind === "rollback") {
            const t = pickOpen(o.pick, undefined)
            if (t !== undefined) t.state = o.kind === "commit" ? "committed" : "rolledBack"
          } else if (o.kind === "clock") {
            // Stepped back, the clock never falls more than the margin behind the latest it showed.
            now = Math.max(now + o.millis, latest - marginMillis + 1)
            latest = Math.max(latest, now)
          } else {
            // The snapshot: xmin is the oldest open xid (or the next one, with none open).
            const xmin = Math.min(nextXid, ...open().map((t) => t.xid))
            const bounds = frontier.bounds()
            const visible = txns
              .filter((t) => t.state === "committed" && t.append !== undefined && within(bounds, t.append))
              .sort((a, b) => a.append!.id - b.append!.id)
            const taken = visible.slice(0, o.limit)
            for (const t of taken) t.state = "numbered"
            const at = now
            // Appends after the snapshot, around the batch's own xid, before it reads the last id.
            for (let k = 0; k < o.before; k++) begin(true)
            const xid = taken.length > 0 ? nextXid++ : undefined
            for (let k = 0; k < o.during; k++) begin(true)
            frontier.observe({
              full: visible.length >= o.limit,
              xmin: BigInt(xmin),
              xid: xid === undefined ? undefined : BigInt(xid),
              at: new Date(at),
              lastId: BigInt(nextId - 1),
            })
            const after = frontier.bounds()
            for (const t of txns) {
              if (t.append === undefined || (t.state !== "open" && t.state !== "committed")) continue
              assert.isTrue(
                within(after, t.append),
                `append ${t.append.id} at ${t.append.at} (xid ${t.xid}, ${t.state}) outside the bounds after ${after.after}, from ${after.from?.getTime()}`,
              )
            }
            assert.isTrue(after.after < BigInt(nextId), "ids yet to come stay above the bound")
            assert.isTrue(after.from === undefined || after.from.getTime() <= now, "appends yet to come stay within it")
          }
        }
      }),
      { numRuns: 2000 },
    )
  })
})

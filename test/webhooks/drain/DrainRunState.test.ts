import { readFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { TargetPolicy } from "../../../src/outbound/OutboundTarget.ts"
import type { Drain } from "../../../src/webhooks/drain/Drain.ts"
import * as RunState from "../../../src/webhooks/drain/DrainRunState.ts"
import type { PendingDelivery, Sent } from "../../../src/webhooks/drain/PendingDeliveries.ts"

const source = readFileSync(
  join(import.meta.dirname, "..", "..", "..", "src", "webhooks", "drain", "DrainRunState.ts"),
  "utf8",
)

/** A run as the drainer makes one, on a drain of which it reads only the policy and `readAhead`. */
const policy: TargetPolicy = { allowHttpLoopback: true, allowCidrs: [], allowHosts: [], resolve: async () => [] }
const drain = { config: { policy }, readAhead: 4 } as unknown as Drain
const withRun = <A>(f: (run: RunState.Run) => A) =>
  Effect.scoped(Effect.map(RunState.make(drain, "00000000-0000-4000-8000-000000000001", 1n, 1), f))

const checked = (seq: bigint): RunState.Checked => ({
  delivery: { deliveryId: seq, eventSeq: seq, occurredAt: new Date(Number(seq)) } as PendingDelivery,
  allowed: true,
  checkedAt: 0,
  exempt: false,
  numberedBy: undefined,
})

const answer = (seq: bigint, ok: boolean): Sent => ({ ...({} as Sent), delivery: checked(seq).delivery, ok })

const seqs = (list: ReadonlyArray<RunState.Checked | Sent>) => list.map((c) => c.delivery.eventSeq)

describe("DrainRunState", () => {
  it("DrainRunStateDiagram: the header names every transition the module exports, and exports every one it names", () => {
    const header = source.slice(0, source.indexOf("*/"))
    const exported = [...source.matchAll(/^export const (\w+)/gm)].map((m) => m[1]!).sort()
    const drawn = [
      ...[...header.matchAll(/──(\w+)/g)].map((m) => m[1]!),
      ...[...header.matchAll(/^ \* {5}(\w+) {2,}/gm)].map((m) => m[1]!),
    ]
    assert.deepStrictEqual([...new Set(drawn)].sort(), exported)
  })

  it.effect(
    "DrainRunRecordOrder: answers whose record failed go back ahead of every answer since, so the record keeps their order",
    () =>
      withRun((r) => {
        RunState.delivered(r, answer(1n, true))
        RunState.delivered(r, answer(2n, true))
        const taken = RunState.recording(r)
        assert.deepStrictEqual(seqs(taken), [1n, 2n])
        assert.deepStrictEqual(r.unrecorded, [], "taken for the record")
        RunState.undelivered(r, answer(3n, false))
        RunState.recordFailed(r, taken)
        assert.deepStrictEqual(seqs(r.unrecorded), [1n, 2n, 3n])
      }),
  )

  it.effect(
    "DrainRunQueue: a new run has read nothing; taking the head moves `after` to it; one put back is first again; what was read along follows a 2xx",
    () =>
      withRun((r) => {
        assert.deepStrictEqual([r.queue, r.incoming, r.unrecorded, r.after, r.size], [[], [], [], -1n, 4])
        RunState.queued(r, [checked(5n), checked(6n)])
        const head = RunState.taken(r)
        assert.strictEqual(head.delivery.eventSeq, 5n)
        assert.strictEqual(r.after, 5n)
        assert.deepStrictEqual(r.afterAt, new Date(5))
        assert.deepStrictEqual(seqs(r.queue), [6n])
        RunState.putBack(r, head)
        assert.deepStrictEqual(seqs(r.queue), [5n, 6n])
        RunState.taken(r)
        RunState.taken(r)
        RunState.readAlong(r, [checked(7n), checked(8n)])
        assert.deepStrictEqual(seqs(r.queue), [], "read along stays apart while its request is out")
        RunState.delivered(r, answer(6n, true))
        assert.isTrue(r.succeeded)
        assert.deepStrictEqual(seqs(r.queue), [7n, 8n])
        assert.deepStrictEqual(r.incoming, [])
      }),
  )

  it.effect(
    "DrainRunDropped: giving numbers back takes the queue and what was read along, in seq order, and empties both",
    () =>
      withRun((r) => {
        RunState.queued(r, [checked(1n)])
        RunState.readAlong(r, [checked(2n)])
        assert.deepStrictEqual(seqs(RunState.dropped(r)), [1n, 2n])
        assert.deepStrictEqual([r.queue, r.incoming], [[], []])
      }),
  )
})

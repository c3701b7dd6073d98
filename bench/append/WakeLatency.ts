/**
 * The `post_commit` wake-up at a rate the sequencer is not busy at: one producer appending one event
 * every 20 ms (50/s) for `BENCH_SECONDS` x 3, commit-to-readable (`CommitToReadable`) with the
 * sequencer woken by appends (`AppendWake`, heard through a `NotificationStream`) against the same
 * sequencer left to its 5 ms poll (no `NotificationStream`: the producer's NOTIFYs go unheard),
 * alternating, `settings.repeats` times each. Under the flat-out producers of `append`'s cases the
 * sequencer is busy anyway and the wake-up sends nothing; this is where it is meant to help.
 */
import { Clock, Duration, Effect, Layer } from "effect"
import { EventLog } from "../../src/log/EventLog.ts"
import * as Sequencer from "../../src/log/Sequencer.ts"
import { NotificationStream } from "../../src/platform/NotificationStream.ts"
import type { BenchServer } from "../harness/BenchServer.ts"
import type { Distribution } from "../harness/Distribution.ts"
import * as Rotation from "../harness/Rotation.ts"
import type * as Throughput from "../harness/Throughput.ts"
import { reset, sample } from "./AppendSample.ts"
import * as CommitToReadable from "./CommitToReadable.ts"

export const wakeModes = ["woken", "polled"] as const
export type WakeMode = (typeof wakeModes)[number]

/** One event per 20 ms. */
export const wakeRate = 50

const once = (server: BenchServer["Service"], settings: Throughput.Settings, mode: WakeMode) =>
  Effect.gen(function* () {
    yield* reset
    const sequencer = Sequencer.layer({ placement: "pending" })
    yield* Layer.build(
      (mode === "woken" ? sequencer.pipe(Layer.provide(NotificationStream.layer())) : sequencer).pipe(
        Layer.provide(server.pool(2)),
      ),
    )
    const readable = yield* CommitToReadable.start.pipe(Effect.provide(yield* Layer.build(server.pool(2))))
    const log = yield* EventLog
    const every = 1000 / wakeRate
    const until = (yield* Clock.currentTimeMillis) + Duration.toMillis(settings.window) * 3
    for (let k = 0; ; k++) {
      const started = yield* Clock.currentTimeMillis
      if (started >= until) break
      const { appended } = yield* log.appendAfter(Effect.void, () => [sample[k % sample.length]!])
      if (appended._tag === "Some" && appended.value._tag === "Unsequenced") readable.committed(appended.value.appendId)
      const left = started + every - (yield* Clock.currentTimeMillis)
      if (left > 0) yield* Effect.sleep(Duration.millis(left))
    }
    // The last appends' stamps come with the sequencer's next batch.
    yield* Effect.sleep("200 millis")
    return readable.distribution()
  }).pipe(Effect.scoped, Effect.provide(EventLog.layerPostCommit.pipe(Layer.provideMerge(server.pool(2)))))

/** Commit-to-readable per mode and repeat, ms. */
export const measure = (server: BenchServer["Service"], settings: Throughput.Settings) =>
  Rotation.rotate(wakeModes, settings.repeats, (mode, repeat) =>
    Effect.map(once(server, settings, mode), (d): Distribution & { readonly repeat: number } => ({ ...d, repeat })),
  )

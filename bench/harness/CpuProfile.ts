/**
 * A CPU profile of this process's main thread over one measured window, when
 * `BENCH_CPU_PROFILE` names a folder: the question "where does the worker's time go" needs the
 * window alone, without the seeding before it or the checks after it. Open the `.cpuprofile` in
 * Chrome's DevTools or any speedscope-like viewer. Without the variable it costs nothing.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { join } from "node:path"
import { Effect } from "effect"

const folder = process.env.BENCH_CPU_PROFILE

/** Starts profiling; the effect it returns stops and writes `<label>.cpuprofile`. */
export const start = (label: string): Effect.Effect<Effect.Effect<void>> =>
  folder === undefined || folder === ""
    ? Effect.succeed(Effect.void)
    : Effect.promise(async () => {
        const session = new Session()
        session.connect()
        await session.post("Profiler.enable")
        await session.post("Profiler.setSamplingInterval", { interval: 200 })
        await session.post("Profiler.start")
        return Effect.promise(async () => {
          const { profile } = await session.post("Profiler.stop")
          session.disconnect()
          mkdirSync(folder, { recursive: true })
          const file = join(folder, `${label.replace(/[^\w.-]+/g, "-")}-${Date.now()}.cpuprofile`)
          writeFileSync(file, JSON.stringify(profile))
        })
      })

/**
 * The run's `bothy worker` processes, started as production starts them: `node src/bin/bothy.ts
 * worker` with `DATABASE_URL` and the VAPID keys in the environment. Each slot keeps its current
 * process; `signal` sends SIGKILL or SIGTERM and `start` brings the slot back. An exit nobody asked
 * for is counted (`unexpectedExits`) and the slot is started again, so a worker that dies on its own
 * is a finding, not a stall. One that exits before it runs is a start that failed: bothy stops with
 * exit 1 when its start cannot reach the database, by design, for its supervisor to start it again. Each process's output goes to a log file in the run's folder.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createWriteStream } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"

const bothy = fileURLToPath(new URL("../src/bin/bothy.ts", import.meta.url))

interface Slot {
  child: ChildProcess | undefined
  /** The exit of the current process was asked for. */
  expected: boolean
  starts: number
  running: Promise<void> | undefined
  exited: Promise<number | null> | undefined
}

/**
 * A failed start the faults account for: its database connection refused (PostgreSQL restarting)
 * or cut (`pg_terminate_backend` during the migrations). Any other is a defect of the start.
 * `@effect/sql-pg` 4.1 words a connection the server closed while it was being opened "Failed to
 * connect" / "Connection closed during startup".
 */
export const faultExplains = (lastLines: string) =>
  /cannot connect to|terminating connection|Connection terminated|Failed to connect|Connection closed (during startup|unexpectedly)|the database system is (starting up|shutting down|not yet accepting)|ECONNRESET|ECONNREFUSED/.test(
    lastLines,
  )

export interface UnexpectedExit {
  readonly worker: number
  /** It had said it runs: false is a start that failed (its migration's connection cut, say). */
  readonly running: boolean
  readonly code: number | null
  readonly signal: string | null
  readonly at: number
  readonly lastLines: string
}

export const make = (options: {
  readonly count: number
  readonly env: Record<string, string>
  readonly logDir: string
}) =>
  Effect.gen(function* () {
    const slots: Array<Slot> = Array.from({ length: options.count }, () => ({
      child: undefined,
      expected: false,
      starts: 0,
      running: undefined,
      exited: undefined,
    }))
    const unexpectedExits: Array<UnexpectedExit> = []
    let stopping = false

    const launch = (i: number): Promise<void> => {
      const slot = slots[i]!
      slot.starts++
      slot.expected = false
      const log = createWriteStream(join(options.logDir, `worker-${i}.log`), { flags: "a" })
      const child = spawn(process.execPath, [bothy, "worker"], {
        // Three workers on one host: each its own free port for metrics and the admin API, which
        // default to fixed ones (a second worker on 127.0.0.1:9465 stops at start).
        env: {
          ...process.env,
          ...options.env,
          BOTHY_METRICS_ADDRESS: "127.0.0.1:0",
          BOTHY_ADMIN_ADDRESS: "127.0.0.1:0",
        },
        stdio: ["ignore", "pipe", "pipe"],
      })
      slot.child = child
      let tail = ""
      let running = false
      const ready = new Promise<void>((resolve) => {
        const onData = (chunk: Buffer) => {
          log.write(chunk)
          tail = (tail + chunk.toString("utf8")).slice(-4000)
          if (!running && /worker running/.test(tail)) {
            running = true
            resolve()
          }
        }
        child.stdout!.on("data", onData)
        child.stderr!.on("data", onData)
        child.on("close", () => resolve())
      })
      slot.exited = new Promise((resolve) =>
        child.on("close", (code, signal) => {
          log.end()
          if (slot.child === child) slot.child = undefined
          if (!slot.expected && !stopping) {
            unexpectedExits.push({ worker: i, running, code, signal, at: Date.now(), lastLines: tail.slice(-1500) })
            setTimeout(() => {
              if (!stopping && slot.child === undefined) slot.running = launch(i)
            }, 1000)
          }
          resolve(code)
        }),
      )
      slot.running = ready
      return ready
    }

    /** Starts slot `i` (if it has no process) and waits until it says it runs. */
    const start = (i: number) =>
      Effect.promise(() => {
        const slot = slots[i]!
        return slot.child === undefined ? launch(i) : (slot.running ?? Promise.resolve())
      })

    /** Sends `signal` to slot `i`'s process and waits for its exit; nothing when it has none. */
    const signal = (i: number, sig: "SIGKILL" | "SIGTERM") =>
      Effect.promise(async () => {
        const slot = slots[i]!
        await slot.running
        const child = slot.child
        if (child === undefined) return undefined
        slot.expected = true
        child.kill(sig)
        return await slot.exited
      })

    const stopAll = Effect.promise(async () => {
      stopping = true
      const codes = await Promise.all(
        slots.map(async (slot) => {
          await slot.running
          if (slot.child === undefined) return 0
          slot.expected = true
          slot.child.kill("SIGTERM")
          return await slot.exited
        }),
      )
      return codes
    })

    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        stopping = true
        for (const slot of slots) slot.child?.kill("SIGKILL")
      }),
    )
    yield* Effect.forEach(slots, (_, i) => start(i), { concurrency: "unbounded" })
    return {
      start,
      signal,
      /** SIGTERM to every worker; their exit codes. */
      stopAll,
      pids: () => slots.map((s) => s.child?.pid),
      unexpectedExits: unexpectedExits as ReadonlyArray<UnexpectedExit>,
      starts: () => slots.map((s) => s.starts),
    }
  })

export type Workers = Effect.Success<ReturnType<typeof make>>

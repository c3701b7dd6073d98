/**
 * The conditions every figure is stated with: the machine (and how busy it was: our machines are
 * shared, so the load average at start and end is part of the result) and the storage under the
 * data folder.
 *
 * A durable commit waits for one flush of the WAL, so the disk's flush latency bounds any write
 * path whose commits cannot share a flush (every gapless append holds the counter lock through its
 * commit). `storage` measures it with the same call PostgreSQL makes by default on Linux
 * (`wal_sync_method = fdatasync`), so a result can be read against that ceiling.
 */
import { closeSync, fdatasyncSync, openSync, readFileSync, rmSync, writeSync } from "node:fs"
import os from "node:os"
import { join } from "node:path"
import { Effect } from "effect"

export interface Machine {
  readonly cpu: string
  readonly cores: number
  readonly memoryGiB: number
  readonly os: string
  readonly node: string
  readonly loadAverage: ReadonlyArray<number>
  /**
   * The benchmark's nice value (PostgreSQL, started by it, inherits it): on a shared machine a
   * run may be given priority over other work (`nice -n -10 npm run bench -- NAME`), and says so.
   */
  readonly niceness: number
}

/** The machine as it looks now. */
export const machine = (): Machine => {
  const cpus = os.cpus()
  return {
    cpu: cpus[0]?.model ?? "unknown",
    cores: cpus.length,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    loadAverage: os.loadavg().map((l) => Math.round(l * 100) / 100),
    niceness: os.getPriority(),
  }
}

export interface Storage {
  readonly folder: string
  readonly filesystem: string
  /** 8 KiB write + fdatasync, repeated: the cost of one WAL flush on this disk. */
  readonly fdatasyncMs: { readonly median: number; readonly p90: number; readonly samples: number }
}

/** Describes the storage under `folder` and times its flushes (about a second at most). */
export const storage = (folder: string) =>
  Effect.sync((): Storage => {
    const file = join(folder, "fdatasync-probe")
    const fd = openSync(file, "w")
    const page = Buffer.alloc(8192, 1)
    const times: Array<number> = []
    try {
      const deadline = performance.now() + 1000
      while (times.length < 200 && performance.now() < deadline) {
        const start = performance.now()
        writeSync(fd, page, 0, page.length, 0)
        fdatasyncSync(fd)
        times.push(performance.now() - start)
      }
    } finally {
      closeSync(fd)
      rmSync(file, { force: true })
    }
    times.sort((a, b) => a - b)
    const at = (q: number) => Math.round((times[Math.floor(q * (times.length - 1))] ?? Number.NaN) * 1000) / 1000
    return {
      folder,
      filesystem: filesystemOf(folder),
      fdatasyncMs: { median: at(0.5), p90: at(0.9), samples: times.length },
    }
  })

/**
 * Filesystem type, device and mount options of the mount holding `path` (Linux; "unknown"
 * elsewhere): options such as `discard` change what freeing blocks costs every commit.
 */
const filesystemOf = (path: string) => {
  try {
    const [mount] = readFileSync("/proc/mounts", "utf8")
      .split("\n")
      .map((line) => line.split(" "))
      .filter(([, at]) => at !== undefined && (path === at || path.startsWith(at.endsWith("/") ? at : `${at}/`)))
      .sort((a, b) => b[1]!.length - a[1]!.length)
    return mount === undefined ? "unknown" : `${mount[2]} on ${mount[0]} (${mount[3]})`
  } catch {
    return "unknown"
  }
}

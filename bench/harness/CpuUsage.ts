/**
 * Who used the CPU during a run: this process (the client, including any worker it hosts), the
 * benchmark's PostgreSQL server (its postmaster and every backend, live or already exited), and
 * the machine as a whole (other tenants included). A throughput that stalls with the client near
 * one core is bound by Node's single thread; one that stalls with the server busy is bound by
 * PostgreSQL; one that stalls with neither busy waits on round trips or flushes.
 *
 * The server's share comes from `/proc`: the postmaster's own time plus the time of the children
 * it has reaped (`cutime`, `cstime`: backends of closed connections) plus that of its live
 * children. On a system without `/proc` it reads 0.
 */
import { readdirSync, readFileSync } from "node:fs"
import os from "node:os"
import { join } from "node:path"

export interface CpuSample {
  readonly at: number
  readonly client: NodeJS.CpuUsage
  /** Clock ticks the server's processes have used so far. */
  readonly serverTicks: number
  /** Clock ticks each live backend (child of the postmaster) has used so far, by pid. */
  readonly backendTicks: ReadonlyMap<number, number>
  readonly idle: number
  readonly total: number
}

/** CPU used between two samples, in cores (1 = one core flat out), and the machine's busy share (0..1). */
export interface CpuUsed {
  readonly clientCores: number
  readonly serverCores: number
  readonly machineBusy: number
}

// USER_HZ: 100 on every Linux architecture Node runs on.
const ticksPerSecond = 100

/** The postmaster's pid, the first line of `postmaster.pid` in the data directory. */
export const postmasterPid = (dataDir: string): number | undefined => {
  try {
    const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0])
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

/** The fields of `/proc/<pid>/stat` after the command name, which may itself hold spaces. */
const statFields = (pid: string): ReadonlyArray<string> | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  } catch {
    return undefined // the process ended between listing and reading
  }
}

// Offsets into `statFields`: field n of proc(5) is at n - 3.
const PPID = 1
const UTIME = 11
const STIME = 12
const CUTIME = 13
const CSTIME = 14

const serverTicks = (postmaster: number | undefined) => {
  const backends = new Map<number, number>()
  if (postmaster === undefined) return { ticks: 0, backends }
  let ticks = 0
  let pids: ReadonlyArray<string>
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name))
  } catch {
    return { ticks: 0, backends }
  }
  for (const pid of pids) {
    const f = statFields(pid)
    if (f === undefined) continue
    const field = (i: number) => Number(f[i] ?? 0)
    if (Number(pid) === postmaster) ticks += field(UTIME) + field(STIME) + field(CUTIME) + field(CSTIME)
    else if (field(PPID) === postmaster) {
      ticks += field(UTIME) + field(STIME)
      backends.set(Number(pid), field(UTIME) + field(STIME))
    }
  }
  return { ticks, backends }
}

export const sample = (postmaster: number | undefined): CpuSample => {
  let idle = 0
  let total = 0
  for (const { times } of os.cpus()) {
    idle += times.idle
    total += times.user + times.nice + times.sys + times.irq + times.idle
  }
  const server = serverTicks(postmaster)
  return {
    at: performance.now(),
    client: process.cpuUsage(),
    serverTicks: server.ticks,
    backendTicks: server.backends,
    idle,
    total,
  }
}

export const since = (start: CpuSample, end: CpuSample): CpuUsed => {
  const seconds = (end.at - start.at) / 1000
  const clientMicros = end.client.user - start.client.user + end.client.system - start.client.system
  return {
    clientCores: round2(clientMicros / 1e6 / seconds),
    serverCores: round2((end.serverTicks - start.serverTicks) / ticksPerSecond / seconds),
    machineBusy: round2(1 - (end.idle - start.idle) / Math.max(1, end.total - start.total)),
  }
}

/**
 * What the backends `pids` used between two samples, in cores: a client's own connections (found in
 * `pg_stat_activity` by their application name), to take them out of the server's share. A
 * backend that started after `start` counts from 0; one that ended before `end` is missed.
 */
export const backendsCores = (start: CpuSample, end: CpuSample, pids: Iterable<number>) => {
  let ticks = 0
  for (const pid of pids) ticks += (end.backendTicks.get(pid) ?? 0) - (start.backendTicks.get(pid) ?? 0)
  return round2(ticks / ticksPerSecond / ((end.at - start.at) / 1000))
}

const round2 = (n: number) => Math.round(n * 100) / 100

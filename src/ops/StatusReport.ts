/**
 * `bothy status` output: a table for people, JSON for scripts. The JSON keeps every field of
 * `Status` under its own name; seqs, which may pass 2^53, are strings there, ages are seconds.
 */
import type { Status } from "./Status.ts"

/** Seconds as an operator reads them: `0s`, `42s`, `3m 20s`, `5h 02m`, `2d 4h`. */
export const age = (seconds: number) => {
  const s = Math.floor(seconds)
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`
}

/** Columns padded to their widest cell, indented two spaces: the tables `bothy` prints for people. */
export const grid = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd()
  return [line(header), ...rows.map(line)].map((l) => `  ${l}`).join("\n")
}

const section = (title: string, body: string) => `${title}\n${body}`

export const table = (status: Status): string => {
  const { consumers, jobs, subscriptions, oldestPendingDelivery: oldest, partitions } = status
  const parts = [
    section(
      "consumers",
      grid(
        ["name", "last_seq", "lag", "pending age"],
        consumers.map((c) => [c.name, String(c.lastSeq), String(c.lag), age(c.pendingAgeSeconds)]),
      ),
    ),
    section(
      "jobs",
      jobs.length === 0
        ? "  none"
        : grid(
            ["kind", "state", "count", "oldest"],
            jobs.map((j) => [j.kind, j.state, String(j.count), age(j.oldestSeconds)]),
          ),
    ),
    section(
      "webhook subscriptions",
      [
        subscriptions.length === 0
          ? "  none"
          : grid(
              ["state", "cause", "count", "degraded"],
              subscriptions.map((s) => [s.state, s.cause ?? "-", String(s.count), String(s.degraded)]),
            ),
        oldest === null
          ? "  oldest pending delivery: none"
          : `  oldest pending delivery: ${age(oldest.ageSeconds)} (subscription ${oldest.subscription}, event ${oldest.eventSeq})`,
      ].join("\n"),
    ),
    section(
      "push registrations",
      `  ${status.pushRegistrations === null ? "none (push is not set up in this database)" : status.pushRegistrations}`,
    ),
    section(
      "event_log partitions",
      partitions.count === 0
        ? "  none: appends fail until the worker creates them"
        : `  ${partitions.count} days kept, oldest ${partitions.oldestDay}; ${partitions.daysAhead} days ahead (through ${partitions.lastDay})`,
    ),
  ]
  return `${parts.join("\n\n")}\n`
}

export const json = (status: Status): string =>
  `${JSON.stringify(status, (_, v) => (typeof v === "bigint" ? String(v) : v), 2)}\n`

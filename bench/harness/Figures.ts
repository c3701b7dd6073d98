/** Small helpers every benchmark writes its figures with. */
import { readFileSync } from "node:fs"
import { resolve } from "node:path"

export const round0 = (n: number) => Math.round(n)

/** Milliseconds to microseconds, ratios to three places. */
export const round3 = (n: number) => Math.round(n * 1000) / 1000

/** The installed version of a package, for the conditions of a result. */
export const packageVersion = (name: string): string =>
  JSON.parse(readFileSync(resolve(import.meta.dirname, "../../node_modules", name, "package.json"), "utf8")).version

/** A ratio as the tables show it. */
export const times = (n: number) => `${n.toFixed(2)}x`

/** A figure that may be missing (no run passed its check) as the tables show it. */
export const fixed = (n: number | undefined, digits = 1) =>
  n !== undefined && Number.isFinite(n) ? n.toFixed(digits) : "n/a"

/**
 * What the console's browser tests share: logging a Chromium page in with the admin token, and
 * reading what the page's charts hold (`window.bothyCharts`, as `assets/console.js` leaves it).
 */
import { mkdirSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import type { Page } from "playwright-core"

export interface Chart {
  readonly series: ReadonlyArray<string>
  readonly data: ReadonlyArray<ReadonlyArray<number | null>>
}

/** Logs `page` in with the admin token and opens `path`. */
export const signIn = (page: Page, base: string, path: string) =>
  Effect.promise(async () => {
    await page.goto(`${base}/console/login?next=${encodeURIComponent(path)}`)
    await page.fill("#token", "t")
    await Promise.all([page.waitForURL(`${base}${path}`), page.click("button[type=submit]")])
  })

/** What the page's charts hold, once drawn: `window.bothyCharts` without uPlot's objects. */
export const drawnCharts = (page: Page) =>
  Effect.promise(async () => {
    // Each function runs in the page, so it names the window itself (the tests have no DOM types).
    await page.waitForFunction(() => Object.keys((globalThis as unknown as Shown).bothyCharts ?? {}).length >= 3)
    return await page.evaluate(() =>
      Object.fromEntries(
        Object.entries((globalThis as unknown as Shown).bothyCharts).map(([name, c]) => [
          name,
          { series: c.series, data: c.data },
        ]),
      ),
    )
  })

/** The page's window as the console's script leaves it. */
interface Shown {
  readonly bothyCharts: Record<string, Chart>
}

/** A path for a screenshot in test/artifacts/ (git-ignored), the folder made. */
export const artifact = (name: string) => {
  const folder = fileURLToPath(new URL("../artifacts/", import.meta.url))
  mkdirSync(folder, { recursive: true })
  return `${folder}${name}`
}

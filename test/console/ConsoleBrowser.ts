/**
 * What the console's browser tests start from and share: the admin server with the console,
 * served for the scope with admin token `token`; a Chromium page that records every dialog it
 * opens (and accepts it), so a test can both confirm actions and prove that no script payload
 * ever called `alert`; signing that page in through `/console/login`; and reading back what the
 * pages show (a table's column, what the charts hold as `assets/console.js` leaves them in
 * `window.bothyCharts`), with screenshots in test/artifacts/.
 */
import { mkdirSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { Effect, Option, Redacted } from "effect"
import type { Page } from "playwright-core"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as Chromium from "../support/Chromium.ts"
import * as TestAdmin from "../support/TestAdmin.ts"

export const token = "t"

/** The admin server with the console for the rest of the scope, with admin token `token`; its base URL. */
export const serve = TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))

export interface Dialog {
  readonly type: string
  readonly message: string
}

/** A page of a Chromium of its own for the scope (`browser`, for more pages and its cookies), not signed in. */
export const open = Effect.gen(function* () {
  const browser = yield* Chromium.launch
  const page = yield* Effect.promise(() => browser.newPage())
  const dialogs: Array<Dialog> = []
  page.on("dialog", (dialog) => {
    dialogs.push({ type: dialog.type(), message: dialog.message() })
    void dialog.accept()
  })
  return { browser, page, dialogs }
})

/** Signs `page` in through the login form with the admin token and waits until it shows `path`. */
export const signIn = (page: Page, base: string, path: string) =>
  Effect.promise(async () => {
    await page.goto(`${base}/console/login?next=${encodeURIComponent(path)}`)
    await page.fill("#token", token)
    await Promise.all([page.waitForURL(`${base}${path}`), page.click("button[type=submit]")])
  })

/**
 * The server and a page signed in as the operator, showing `path`: straight to the subscriptions
 * unless told, the overview being another page's.
 */
export const operator = (path = "/console/subscriptions") =>
  Effect.gen(function* () {
    const base = yield* serve
    const opened = yield* open
    yield* signIn(opened.page, base, path)
    return { base, ...opened }
  })

/** Goes to `path` of the console; the HTTP status. */
export const visit = (page: Page, base: string, path: string) =>
  Effect.promise(async () => (await page.goto(`${base}${path}`))?.status())

/** The texts of the cells in column `column` (1-based) of the rows matching `rows`. */
export const column = (page: Page, rows: string, column: number) =>
  Effect.promise(() => page.locator(`${rows} > td:nth-child(${column})`).allInnerTexts())

export interface Chart {
  readonly series: ReadonlyArray<string>
  readonly data: ReadonlyArray<ReadonlyArray<number | null>>
}

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

/** A screenshot of the whole of `page`, as test/artifacts/`name` (git-ignored; the folder made). */
export const screenshot = (page: Page, name: string) =>
  Effect.promise(() => {
    const folder = fileURLToPath(new URL("../artifacts/", import.meta.url))
    mkdirSync(folder, { recursive: true })
    return page.screenshot({ path: `${folder}${name}`, fullPage: true })
  })

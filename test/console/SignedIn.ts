/**
 * The admin server with the console, served for the scope with admin token "t", and a Chromium
 * page signed in through `/console/login` as the operator: what each console test starts from.
 * `dialogs` records every dialog the page opened (and accepts it), so a test can both confirm
 * actions and prove that no script payload ever called `alert`.
 */
import { Effect, Option, Redacted } from "effect"
import type { Page } from "playwright-core"
import { AdminAuth } from "../../src/admin/AdminAuth.ts"
import * as Chromium from "../support/Chromium.ts"
import * as TestAdmin from "../support/TestAdmin.ts"

export const token = "t"

export const operator = Effect.gen(function* () {
  const base = yield* TestAdmin.serve(AdminAuth.token(Option.some(Redacted.make(token))))
  const browser = yield* Chromium.launch
  const page = yield* Effect.promise(() => browser.newPage())
  const dialogs: Array<{ readonly type: string; readonly message: string }> = []
  page.on("dialog", (dialog) => {
    dialogs.push({ type: dialog.type(), message: dialog.message() })
    void dialog.accept()
  })
  yield* Effect.promise(async () => {
    // Straight to the subscriptions: the overview is another page's, not needed here.
    await page.goto(`${base}/console/login?next=/console/subscriptions`)
    await page.fill("#token", token)
    await Promise.all([page.waitForURL(/\/console\/subscriptions$/), page.click("button[type=submit]")])
  })
  return { base, page, dialogs }
})

/** Goes to `path` of the console; the HTTP status. */
export const visit = (page: Page, base: string, path: string) =>
  Effect.promise(async () => (await page.goto(`${base}${path}`))?.status())

/** The texts of the cells in column `column` (1-based) of the rows matching `rows`. */
export const column = (page: Page, rows: string, column: number) =>
  Effect.promise(() => page.locator(`${rows} > td:nth-child(${column})`).allInnerTexts())

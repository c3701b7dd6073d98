/**
 * The console's files, served by the admin server itself: its script and styles (shipped in the
 * package beside this module), uPlot from its package, and the host's colour as a style sheet (the
 * CSP allows no inline style). No CDN: the console works on a machine with no way out.
 */
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { Effect } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { get, type Route } from "./ConsolePage.ts"
import * as ConsoleSession from "./ConsoleSession.ts"

const require = createRequire(import.meta.url)
const own = (name: string) => readFileSync(new URL(`./assets/${name}`, import.meta.url), "utf8")
const uplot = (name: string) => readFileSync(require.resolve(`uplot/dist/${name}`), "utf8")

const javascript = "text/javascript; charset=utf-8"
const css = "text/css; charset=utf-8"

const files = (): Record<string, { readonly body: string; readonly type: string }> => ({
  "console.js": { body: own("console.js"), type: javascript },
  "console.css": { body: own("console.css"), type: css },
  "uPlot.iife.min.js": { body: uplot("uPlot.iife.min.js"), type: javascript },
  "uPlot.min.css": { body: uplot("uPlot.min.css"), type: css },
})

const headers = { "x-content-type-options": "nosniff", "cache-control": "public, max-age=300" }

let loaded: ReturnType<typeof files> | undefined

/** `GET /console/assets/:name`. */
export const route: Route<ConsoleSession.ConsoleSessions> = get("/console/assets/:name", () =>
  Effect.gen(function* () {
    loaded ??= files()
    const { name } = yield* HttpRouter.params
    const sessions = yield* ConsoleSession.ConsoleSessions
    if (name === "brand.css") {
      return HttpServerResponse.text(`:root { --accent: ${sessions.settings.accent}; }\n`, {
        contentType: css,
        headers,
      })
    }
    const file = name === undefined ? undefined : loaded[name]
    return file === undefined
      ? HttpServerResponse.text("no such file", { status: 404 })
      : HttpServerResponse.text(file.body, { contentType: file.type, headers })
  }),
)

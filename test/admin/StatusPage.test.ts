/**
 * The status page as an operator sees it: served on a port-0 socket from the route layer the admin
 * server mounts, loaded in a real headless Chromium, read by its visible text. The database holds
 * what the page must show: a subscription whose receiver answers, one whose receiver fails (with
 * markup in its answer, which must arrive as text), a disabled one, and a `webhooks` consumer two
 * events behind. The screenshot lands in test/artifacts/status-page.png (git-ignored). On a database
 * with no bothy schema the page answers 503 with the reason.
 */
import { mkdirSync } from "node:fs"
import { createServer } from "node:http"
import { fileURLToPath } from "node:url"
import { NodeHttpServer } from "@effect/platform-node"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { HttpRouter, HttpServer } from "effect/http"
import { SqlClient } from "effect/sql"
import * as StatusPage from "../../src/admin/StatusPage.ts"
import * as WebhookSubscriptions from "../../src/webhooks/subscriptions/WebhookSubscriptions.ts"
import * as Chromium from "../support/Chromium.ts"
import * as LoopbackServer from "../support/LoopbackServer.ts"
import * as TestDatabase from "../support/TestDatabase.ts"
import * as TestWebhooks from "../support/TestWebhooks.ts"

const artifacts = fileURLToPath(new URL("../artifacts/", import.meta.url))

/** What the failing receiver answers: markup and quotes, which the page must show as text. */
const failure = `<b id="injected">boom</b> & "quoted"`

/** The page's route on 127.0.0.1, port 0, for the scope; its URL. */
const serve = (options: StatusPage.StatusPageOptions) =>
  Effect.gen(function* () {
    const context = yield* Layer.build(
      HttpRouter.serve(StatusPage.layer(options), { disableLogger: true, disableListenLog: true }).pipe(
        Layer.provideMerge(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port: 0 })),
      ),
    )
    return yield* HttpServer.addressFormattedWith((url) => Effect.succeed(`${url}/`)).pipe(Effect.provide(context))
  })

const count = (sql: SqlClient.SqlClient, subscription: string) =>
  sql<{ delivered: number; failed: number }>`
    SELECT count(*) FILTER (WHERE d.state = 'delivered')::int AS delivered,
           (SELECT count(*)::int FROM webhook_attempts AS a JOIN webhook_deliveries AS f ON f.id = a.delivery_id
            WHERE f.subscription_id = ${subscription}::uuid AND a.status = 500) AS failed
    FROM webhook_deliveries AS d WHERE d.subscription_id = ${subscription}::uuid`.pipe(Effect.map((rows) => rows[0]!))

layer(TestWebhooks.layer(), { excludeTestServices: true })("the status page", (it) => {
  it.effect(
    "StatusPageRendersInBrowser: Chromium shows consumers with lag, subscriptions by state and cause with their oldest pending delivery, recent attempts with outcomes (a receiver's markup as text), jobs by state; it reloads itself",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const server = yield* LoopbackServer.http((request, response) =>
          request.url === "/failing"
            ? response.writeHead(500, { "content-type": "text/html" }).end(failure)
            : response.writeHead(200).end("ok"),
        )
        const receiver = { url: (path: string) => `${server.origin}${path}` }
        const ok = yield* TestWebhooks.subscribe("page-owner", receiver.url("/ok"), ["page-space"])
        const failing = yield* TestWebhooks.subscribe("page-owner", receiver.url("/failing"), ["page-space"])
        const off = yield* TestWebhooks.subscribe("page-owner", receiver.url("/off"), ["page-space"])
        yield* (yield* WebhookSubscriptions.WebhookSubscriptions).disable(off.id)
        for (const i of [1, 2, 3]) yield* TestWebhooks.append("page-space", { i })
        yield* TestWebhooks.round()

        // Drainers until the good receiver has all three and the failing one has failed once; then
        // they stop, so what the page shows holds still while the test compares it with the tables.
        yield* Effect.gen(function* () {
          const signals = yield* TestWebhooks.signals
          yield* TestWebhooks.startDrainers(signals)
          yield* signals.until(
            Effect.map(
              Effect.zip(count(sql, ok.id), count(sql, failing.id)),
              ([good, bad]) => good.delivered === 3 && bad.failed >= 1,
            ),
          )
        }).pipe(Effect.scoped)
        // Two events the `webhooks` consumer has not read: its lag.
        for (const i of [4, 5]) yield* TestWebhooks.append("page-space", { i })

        // A page that holds still while it is read; the reload is proved on one of its own below.
        const url = yield* serve({ refreshSeconds: 3600 })
        const browser = yield* Chromium.launch
        const page = yield* Effect.promise(() => browser.newPage())
        const response = yield* Effect.promise(() => page.goto(url))
        assert.strictEqual(response?.status(), 200)
        // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what the test asserts on
        const text = (selector: string) => Effect.promise(() => page.locator(selector).innerText())

        assert.strictEqual(yield* Effect.promise(() => page.title()), "bothy status")
        const webhooks = yield* text(`#consumers tr[data-consumer="webhooks"]`)
        assert.match(webhooks, /^webhooks\s+\d+\s+\d+\s+2\s+\d+s\s/, webhooks)

        const groups = yield* text("#subscriptions table >> nth=0")
        assert.match(groups, /active\s+-\s+2\s+0\s+\d+s/, groups)
        assert.match(groups, /disabled\s+manual\s+1\s+0\s+none pending/, groups)
        const failingRow = yield* text(`#subscriptions tr[data-subscription="${failing.id}"]`)
        assert.include(failingRow, receiver.url("/failing"))
        assert.match(failingRow, /active\s+\d+s \(event \d+\)\s+[1-9]\d*\s+500/, failingRow)
        assert.include(yield* text(`#subscriptions tr[data-subscription="${off.id}"]`), "disabled (manual)")
        assert.match(yield* text(`#subscriptions tr[data-subscription="${ok.id}"]`), /active\s+none\s+-\s+-/)

        const attempts = yield* text("#attempts")
        assert.include(attempts, failure, "the receiver's markup is shown as text")
        assert.strictEqual(yield* Effect.promise(() => page.locator("#injected").count()), 0, "and never as markup")
        assert.strictEqual(
          (attempts.match(new RegExp(`${receiver.url("/ok")}\\s+\\d+\\s+1\\s+200\\s+\\d+ ms\\s+delivered`, "g")) ?? [])
            .length,
          3,
          attempts,
        )
        assert.match(attempts, new RegExp(`${receiver.url("/failing")}\\s+\\d+\\s+\\d+\\s+500`))

        const jobs = yield* sql<{ kind: string; state: string; n: number }>`
          SELECT kind, state::text AS state, count(*)::int AS n FROM jobs GROUP BY kind, state`
        assert.isNotEmpty(jobs)
        const header = yield* Effect.promise(() => page.locator("#jobs th").allInnerTexts())
        for (const job of jobs) {
          const cells = yield* Effect.promise(() =>
            page.locator(`#jobs tr[data-kind="${job.kind}"] td`).allInnerTexts(),
          )
          assert.match(cells[header.indexOf(job.state)] ?? "", new RegExp(`^${job.n} \\(oldest \\d+s\\)$`), job.state)
        }

        mkdirSync(artifacts, { recursive: true })
        const screenshot = `${artifacts}status-page.png`
        yield* Effect.promise(() => page.screenshot({ path: screenshot, fullPage: true }))
        yield* Effect.log(`status page screenshot: ${screenshot}`)

        // It reloads on its own and reads afresh: the browser asks again, unprompted, and a later
        // answer shows the third unread event.
        const reloading = yield* Effect.promise(() => browser.newPage())
        const reloadingUrl = yield* serve({ refreshSeconds: 1 })
        yield* Effect.promise(() => reloading.goto(reloadingUrl))
        yield* TestWebhooks.append("page-space", { i: 6 })
        const lagOf = (body: string) =>
          /data-consumer="webhooks">(?:\s*<td[^>]*>[^<]*<\/td>){3}\s*<td[^>]*>(\d+)</.exec(body)?.[1]
        let lag: string | undefined
        while (lag !== "3") {
          const next = yield* Effect.promise(() => reloading.waitForResponse(reloadingUrl))
          lag = lagOf(yield* Effect.promise(() => next.text()))
        }
      }).pipe(Effect.scoped),
    120_000,
  )
})

layer(TestDatabase.layerEmpty(), { excludeTestServices: true })(
  "the status page on a database bothy never migrated",
  (it) => {
    it.effect("StatusPageUnavailableSaysWhy: it answers 503 with the reason, and keeps reloading", () =>
      Effect.gen(function* () {
        const url = yield* serve({ refreshSeconds: 7 })
        const response = yield* Effect.promise(() => fetch(url))
        const body = yield* Effect.promise(() => response.text())
        assert.strictEqual(response.status, 503)
        assert.include(body, "The database cannot be read: the database has no event_consumer_cursors table")
        assert.include(body, `<meta http-equiv="refresh" content="7">`)
      }).pipe(Effect.scoped),
    )
  },
)

layer(TestWebhooks.layer(), { excludeTestServices: true })("the status page's attempts", (it) => {
  it.effect(
    "StatusPageAttemptsByTime: recent attempts are listed by when they started, newest first: a retry of an older delivery comes before the first attempt of a later one",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const sub = yield* TestWebhooks.subscribe("time-owner", "http://127.0.0.1:9/t", ["time-space"])
        yield* TestWebhooks.append("time-space", { i: 1 })
        yield* TestWebhooks.append("time-space", { i: 2 })
        yield* TestWebhooks.round()
        const [older, newer] = yield* sql<{ id: bigint }>`
          SELECT id FROM webhook_deliveries WHERE subscription_id = ${sub.id}::uuid ORDER BY id`
        const at = (seconds: number) => new Date(Date.UTC(2026, 11, 1, 12, 0, seconds))
        // The older delivery failed, the newer one went out, then the older one's retry.
        const attempts: ReadonlyArray<readonly [bigint, number, Date, number]> = [
          [older!.id, 1, at(0), 503],
          [newer!.id, 1, at(10), 200],
          [older!.id, 2, at(20), 200],
        ]
        for (const [delivery, number, startedAt, status] of attempts) {
          yield* sql`
            INSERT INTO webhook_attempts (delivery_id, number, started_at, duration_ms, status)
            VALUES (${delivery}, ${number}, ${startedAt}, 5, ${status})`
        }
        const html = yield* StatusPage.render({ attempts: 10 })
        const section = html.slice(html.indexOf('<section id="attempts">'))
        const listed = [...section.matchAll(/<td>(\d{4}-[^<]+)<\/td>/g)].map((m) => m[1])
        assert.deepStrictEqual(
          listed,
          [at(20), at(10), at(0)].map((d) => d.toISOString()),
        )
        const rows = [...section.matchAll(/data-delivery="(\d+)"/g)].map((m) => m[1])
        assert.deepStrictEqual(rows, [String(older!.id), String(newer!.id), String(older!.id)])
      }),
  )
})

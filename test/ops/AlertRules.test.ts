import { readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as AlertRules from "../../src/ops/AlertRules.ts"
import * as BothyConfig from "../../src/platform/BothyConfig.ts"
import * as EmbeddedServer from "../../testkit/EmbeddedServer.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as Promtool from "../support/Promtool.ts"

const root = fileURLToPath(new URL("../..", import.meta.url))
const deploy = join(root, "deploy/prometheus")
const committed = () => readFileSync(join(deploy, "alerts.yml"), "utf8")

/** GitHub's anchor of a Markdown heading: lower case, spaces to dashes, punctuation dropped. */
const anchors = (markdown: string) =>
  new Set(
    [...markdown.matchAll(/^#+ (.+)$/gm)].map((m) =>
      m[1]!
        .trim()
        .toLowerCase()
        .replace(/[^a-z0-9 _-]/g, "")
        .replaceAll(" ", "-"),
    ),
  )

describe("alert rules", () => {
  it.live("AlertRulesPassPromtool: `promtool check rules` and `promtool test rules` pass on deploy/prometheus", () =>
    Effect.gen(function* () {
      const checked = yield* Promtool.run(["check", "rules", "alerts.yml"], { cwd: deploy })
      assert.strictEqual(checked.code, 0, checked.output)
      assert.match(checked.output, /SUCCESS: 7 rules found/)
      const tested = yield* Promtool.run(["test", "rules", "alerts.test.yml"], { cwd: deploy })
      assert.strictEqual(tested.code, 0, tested.output)
      assert.match(tested.output, /SUCCESS/)
    }),
  )

  it.live(
    "AlertRulesMatchConfig: deploy/prometheus/alerts.yml is the rendering of the default consumer.pending_alert_after",
    () =>
      Effect.sync(() => {
        const pendingAlertAfter = Effect.runSync(
          Effect.fromResult(BothyConfig.parseDuration(BothyConfig.defaults["consumer.pending_alert_after"])),
        )
        assert.strictEqual(committed(), AlertRules.render({ pendingAlertAfter }))
      }),
  )

  it.live(
    "AlertRulesRenderedFromConfig: `bothy alerts render` takes the lag threshold from BOTHY_CONSUMER_PENDING_ALERT_AFTER",
    () =>
      Effect.gen(function* () {
        const dir = yield* EmbeddedServer.tempFolder("bothy-alerts-")
        const output = join(dir, "alerts.yml")
        const run = yield* NodeProcess.run(NodeProcess.bothy, ["alerts", "render", "--output", output], {
          BOTHY_CONSUMER_PENDING_ALERT_AFTER: "90m",
        })
        assert.strictEqual(run.code, 0, run.stderr)
        const rules = readFileSync(output, "utf8")
        assert.include(rules, "max by (consumer) (bothy_event_consumer_pending_age_seconds) > 5400")
        const checked = yield* Promtool.run(["check", "rules", output])
        assert.strictEqual(checked.code, 0, checked.output)
        // A value the worker would refuse is refused here too, naming the variable.
        const bad = yield* NodeProcess.run(NodeProcess.bothy, ["alerts", "render"], {
          BOTHY_CONSUMER_PENDING_ALERT_AFTER: "30d",
          BOTHY_SYNC_EVENT_RETENTION: "7d",
        })
        assert.strictEqual(bad.code, 1)
        assert.include(bad.stderr, "BOTHY_CONSUMER_PENDING_ALERT_AFTER")
      }).pipe(Effect.scoped),
  )

  it.live("AlertRunbooksExist: every alert has a runbook_url naming its section of docs/operations.md", () =>
    Effect.sync(() => {
      const sections = anchors(readFileSync(join(root, "docs/operations.md"), "utf8"))
      const rules = AlertRules.rules({ pendingAlertAfter: Duration.hours(1) })
      for (const rule of rules) {
        const url = AlertRules.runbookUrl(AlertRules.defaultRunbookBase, rule.alert)
        assert.include(committed(), `runbook_url: "${url}"`, rule.alert)
        assert.isTrue(sections.has(url.split("#")[1]!), `docs/operations.md has a section for ${rule.alert}`)
      }
    }),
  )
})

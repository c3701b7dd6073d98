/**
 * `bothy start` (`npm start`) as a person runs it, minus the terminal: a child in its own process
 * group on a fresh `BOTHY_HOME`, read by its output lines. Events, webhook deliveries (each
 * signature verified by the demo's receiver with `standardwebhooks`) and pushes (each decrypted by
 * the demo's push service) count up; Ctrl-C (SIGINT to the group) prints the summary, exits 0 and
 * leaves no process; a second start on the same home says it reuses the data kept there.
 */
import { existsSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as EmbeddedWorker from "../support/EmbeddedWorker.ts"
import * as NodeProcess from "../support/NodeProcess.ts"

/** The counts of a progress line (`demo: events appended N | deliveries done N | pushes N | ...`). */
const progress = /demo: events appended (\d+) \| deliveries done (\d+) \| pushes (\d+) \|/
const countsOf = (line: string) => {
  const [, events, deliveries, pushes] = progress.exec(line)!
  return { events: Number(events), deliveries: Number(deliveries), pushes: Number(pushes) }
}

/** A bound that catches a hang, not a speed target. */
const noHang = "90 seconds"

const summaryNumber = (stdout: string, label: string) => {
  const match = new RegExp(`^\\s+${label}\\s+(\\d+)`, "m").exec(stdout)
  assert.isNotNull(match, `the summary has ${label}: ${stdout.slice(-800)}`)
  return Number(match![1])
}

/** Starts `bothy start` on `home`; waits until it runs; returns it with its server's folder and pid. */
const start = (home: string) =>
  Effect.gen(function* () {
    const { worker } = yield* EmbeddedWorker.start({ BOTHY_HOME: home }, {}, ["start", "--rate", "30"])
    const { dataDir, postmaster } = yield* EmbeddedWorker.running(worker)
    return { worker, dataDir, postmaster }
  })

/** Ctrl-C as a terminal sends it: SIGINT to the whole group; what it printed, once every process is gone. */
const interrupt = (run: Effect.Success<ReturnType<typeof start>>) =>
  Effect.gen(function* () {
    const pgid = run.worker.child.pid!
    process.kill(-pgid, "SIGINT")
    const out = yield* run.worker.exited.pipe(
      Effect.timeoutOrElse({
        duration: noHang,
        orElse: () => Effect.die(`bothy start did not exit: ${run.worker.stdout()}`),
      }),
    )
    assert.strictEqual(out.code, 0, out.stderr)
    assert.isFalse(NodeProcess.groupAlive(run.postmaster), "no process of the embedded server is left")
    assert.isFalse(NodeProcess.groupAlive(pgid), "no process of bothy's group is left")
    assert.isFalse(existsSync(join(run.dataDir, "postmaster.pid")), "the server shut down cleanly")
    return out
  })

describe("bothy start", () => {
  it.live(
    "StartRunsTheDemo: events, verified webhook deliveries, decrypted pushes and APNs and FCM pushes (their tokens verified by the stand-ins) count up; Ctrl-C prints the summary, exits 0 and leaves no process; a second start reuses the data it kept",
    () =>
      Effect.gen(function* () {
        const home = yield* EmbeddedWorker.home
        const first = yield* start(home)
        yield* EmbeddedWorker.removeWithScope(first.dataDir)
        yield* first.worker.waitFor(new RegExp(`a new bothy in ${home}`))
        yield* first.worker.waitFor(/status page: http:\/\/127\.0\.0\.1:\d+\//)
        // The first progress line with deliveries and pushes, then one with more of each.
        const counted = yield* first.worker.waitFor(
          /demo: events appended \d+ \| deliveries done [1-9]\d* \| pushes [1-9]\d* \| apns [1-9]\d* \| fcm [1-9]/,
        )
        const before = countsOf(counted)
        let after = before
        for (let n = 1; after.deliveries <= before.deliveries || after.pushes <= before.pushes; n++) {
          after = countsOf(yield* first.worker.waitFor(progress, n))
        }
        assert.isAbove(after.events, before.events)

        const out = yield* interrupt(first)
        assert.match(out.stdout, /^bothy start: stopped after \d+/m)
        const appended = summaryNumber(out.stdout, "events appended")
        assert.isAtLeast(appended, after.events)
        assert.isAtLeast(summaryNumber(out.stdout, "deliveries"), after.deliveries)
        assert.match(out.stdout, /^\s+deliveries\s+(\d+) webhooks \(signatures verified \1\)$/m)
        assert.isAtLeast(summaryNumber(out.stdout, "pushes"), after.pushes)
        assert.strictEqual(summaryNumber(out.stdout, "failures"), 0, out.stdout.slice(-800))
        // Each member's iPhone and Android phone hear of the events as its browser does.
        assert.isAtLeast(summaryNumber(out.stdout, "apns pushes"), 1)
        assert.isAtLeast(summaryNumber(out.stdout, "fcm pushes"), 1)

        const second = yield* start(home)
        assert.strictEqual(second.dataDir, first.dataDir, "the same cluster")
        const reuse = yield* second.worker.waitFor(/reusing the data kept in/)
        assert.include(
          reuse,
          `reusing the data kept in ${home} from an earlier start: ${appended} events in the log, 3 of the demo's subscriptions kept`,
        )
        yield* second.worker.waitFor(/demo: events appended \d+ \| deliveries done [1-9]/)
        const again = yield* interrupt(second)
        assert.strictEqual(summaryNumber(again.stdout, "failures"), 0, again.stdout.slice(-800))
      }).pipe(Effect.scoped),
    240_000,
  )
})

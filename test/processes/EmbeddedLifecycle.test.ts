/**
 * The embedded server's lifecycle under a real `bothy worker`: a terminal's Ctrl-C, the server dying
 * under the worker, and SIGTERM at each point of a run. Every run is its own process group, as from
 * a terminal, and every test checks that neither bothy's group nor the server's is left behind.
 */
import { existsSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as EmbeddedWorker from "../support/EmbeddedWorker.ts"
import * as NodeProcess from "../support/NodeProcess.ts"

// Far above a stop that takes about a second: a bound that catches a hang, not a speed target.
const noHang = "45 seconds"
const exitedWithin = (worker: NodeProcess.Running) =>
  worker.exited.pipe(
    Effect.timeoutOrElse({
      duration: noHang,
      orElse: () => Effect.die(`bothy did not exit within ${noHang}: ${worker.stdout()}`),
    }),
  )
const warnings = /\b(WARN|ERROR|FATAL)\b/

describe("embedded server lifecycle", () => {
  it.live(
    "CtrlCStopsCleanly: a real SIGINT to the process group, as a terminal sends it: exit 0, at most 2 lines on stderr, no process left",
    () =>
      Effect.gen(function* () {
        const home = yield* EmbeddedWorker.home
        const { worker } = yield* EmbeddedWorker.start({ BOTHY_HOME: home })
        const { dataDir, postmaster } = yield* EmbeddedWorker.running(worker)
        const pgid = worker.child.pid!
        assert.isTrue(NodeProcess.groupAlive(postmaster), "the server runs in its own process group")
        assert.notStrictEqual(postmaster, pgid)
        const before = worker.stdout().length

        process.kill(-pgid, "SIGINT")
        const out = yield* exitedWithin(worker)

        assert.strictEqual(out.code, 0, out.stderr)
        assert.isAtMost(EmbeddedWorker.lines(out.stderr).length, 2, out.stderr)
        assert.notMatch(out.stdout.slice(before), warnings, "nothing went wrong while stopping")
        assert.isFalse(NodeProcess.groupAlive(postmaster), "no process of the server is left")
        assert.isFalse(NodeProcess.groupAlive(pgid), "no process of bothy's group is left")
        assert.isFalse(existsSync(join(dataDir, "postmaster.pid")), "the server shut down cleanly")
      }).pipe(Effect.scoped),
    120_000,
  )

  it.live(
    "EmbeddedServerDeathEndsWorker: SIGKILL of the embedded postmaster ends the worker with one line and exit 1",
    () =>
      Effect.gen(function* () {
        const home = yield* EmbeddedWorker.home
        const { worker } = yield* EmbeddedWorker.start({ BOTHY_HOME: home })
        const { postmaster } = yield* EmbeddedWorker.running(worker)

        process.kill(postmaster, "SIGKILL")
        const out = yield* exitedWithin(worker)

        assert.strictEqual(out.code, 1, out.stderr)
        const lines = EmbeddedWorker.lines(out.stderr)
        assert.strictEqual(lines.length, 1, out.stderr)
        assert.match(
          lines[0]!,
          new RegExp(
            `^bothy: the embedded PostgreSQL \\(pid ${postmaster}, .*\\) exited on its own \\(killed by SIGKILL\\)`,
          ),
        )
        assert.isFalse(NodeProcess.groupAlive(postmaster), "no backend of the dead server is left")
        assert.isFalse(NodeProcess.groupAlive(worker.child.pid!))

        // The next start on the same home recovers the cluster.
        const again = yield* EmbeddedWorker.start({ BOTHY_HOME: home })
        yield* EmbeddedWorker.running(again.worker)
        again.worker.child.kill("SIGTERM")
        assert.strictEqual((yield* exitedWithin(again.worker)).code, 0)
      }).pipe(Effect.scoped),
    120_000,
  )

  it.live(
    "EmbeddedServerDeathEndsWorker: a SIGTERM at any point never hangs (starting, initialising, listening, running, just after the server died)",
    () =>
      Effect.gen(function* () {
        // Each point is reached by what the worker prints (or did), and answers the postmaster's pid once known.
        const points: ReadonlyArray<readonly [string, (w: NodeProcess.Running) => Effect.Effect<number | undefined>]> =
          [
            ["at once", () => Effect.succeed(undefined)],
            ["initialising", (w) => w.waitFor(/creating the embedded PostgreSQL cluster/).pipe(Effect.as(undefined))],
            [
              "listening",
              (w) =>
                Effect.map(w.waitFor(/embedded PostgreSQL 18 listening on/), (l) =>
                  EmbeddedWorker.postmasterPid(EmbeddedWorker.dataDirIn(l)),
                ),
            ],
            ["running", (w) => Effect.map(EmbeddedWorker.running(w), (r) => r.postmaster)],
            [
              "just after the server died",
              (w) =>
                Effect.map(EmbeddedWorker.running(w), (r) => {
                  process.kill(r.postmaster, "SIGKILL")
                  return r.postmaster
                }),
            ],
          ]
        const homes: Array<string> = []
        for (const [point, reach] of points) {
          const home = yield* EmbeddedWorker.home
          homes.push(home)
          const { worker } = yield* EmbeddedWorker.start({ BOTHY_HOME: home })
          const postmaster = yield* reach(worker)
          worker.child.kill("SIGTERM")
          // "at once" may land before Node installs its handlers: then SIGTERM's default action ends it.
          const out = yield* exitedWithin(worker)
          assert.isTrue(out.code !== null || out.signal === "SIGTERM", `${point}: ${out.code} ${out.signal}`)
          assert.isFalse(NodeProcess.groupAlive(worker.child.pid!), `${point}: nothing of bothy's group is left`)
          if (postmaster !== undefined)
            assert.isFalse(NodeProcess.groupAlive(postmaster), `${point}: the server stopped`)
        }
        // An interrupted first start leaves no half-made cluster: the same home starts normally.
        assert.isFalse(existsSync(join(homes[1]!, "pg", "PG_VERSION")), "the interrupted initdb left no cluster")
        const again = yield* EmbeddedWorker.start({ BOTHY_HOME: homes[1]! })
        yield* EmbeddedWorker.running(again.worker)
        again.worker.child.kill("SIGTERM")
        assert.strictEqual((yield* exitedWithin(again.worker)).code, 0)
      }).pipe(Effect.scoped),
    300_000,
  )
  it.live(
    "KilledWorkerServerStoppedAtNextStart: a bothy killed with SIGKILL leaves its server running; the next start on that home stops it and starts its own, while a server a live bothy runs is refused",
    () =>
      Effect.gen(function* () {
        const home = yield* EmbeddedWorker.home
        const first = yield* EmbeddedWorker.start({ BOTHY_HOME: home })
        const { postmaster } = yield* EmbeddedWorker.running(first.worker)
        const env = { BOTHY_HOME: home, BOTHY_EMBEDDED_PORT: first.port }

        // Another bothy on the same home while the first runs: refused, the server untouched.
        const second = yield* EmbeddedWorker.start(env)
        const refused = yield* exitedWithin(second.worker)
        assert.strictEqual(refused.code, 1, refused.stderr)
        assert.include(
          refused.stderr,
          `another bothy (pid ${first.worker.child.pid}) runs its server (pid ${postmaster})`,
        )
        assert.isTrue(NodeProcess.groupAlive(postmaster))

        // kill -9: no finalizer runs, so the server is left behind.
        first.worker.child.kill("SIGKILL")
        yield* exitedWithin(first.worker)
        assert.isTrue(NodeProcess.groupAlive(postmaster), "the server outlives a SIGKILL of its bothy")

        const third = yield* EmbeddedWorker.start(env)
        const { postmaster: own } = yield* EmbeddedWorker.running(third.worker)
        assert.notStrictEqual(own, postmaster)
        assert.isFalse(NodeProcess.groupAlive(postmaster), "the server left behind was stopped")
        assert.include(
          third.worker.stdout(),
          `stopping the embedded PostgreSQL (pid ${postmaster}) left running by bothy pid ${first.worker.child.pid}`,
        )
        third.worker.child.kill("SIGTERM")
        const out = yield* exitedWithin(third.worker)
        assert.strictEqual(out.code, 0, out.stderr)
        assert.isFalse(NodeProcess.groupAlive(own), "and its own stops with it")
      }).pipe(Effect.scoped),
    180_000,
  )
})

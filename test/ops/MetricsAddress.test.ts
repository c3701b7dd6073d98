import { assert, describe, it } from "@effect/vitest"
import { Effect, Option, Result } from "effect"
import { parseAddress } from "../../src/ops/MetricsEndpoint.ts"
import * as NodeProcess from "../support/NodeProcess.ts"
import * as WorkerProcess from "../support/WorkerProcess.ts"

describe("metrics.address", () => {
  it("MetricsAddressParses: host:port, [v6]:port and off; anything else is refused", () => {
    assert.deepStrictEqual(
      parseAddress("127.0.0.1:9464"),
      Result.succeed(Option.some({ host: "127.0.0.1", port: 9464 })),
    )
    assert.deepStrictEqual(parseAddress("[::1]:9464"), Result.succeed(Option.some({ host: "::1", port: 9464 })))
    assert.deepStrictEqual(parseAddress("0.0.0.0:0"), Result.succeed(Option.some({ host: "0.0.0.0", port: 0 })))
    assert.deepStrictEqual(parseAddress(" OFF "), Result.succeed(Option.none()))
    for (const bad of ["9464", "127.0.0.1", "127.0.0.1:65536", "::1:9464", "http://127.0.0.1:9464", "a b:1"]) {
      assert.isTrue(Result.isFailure(parseAddress(bad)), bad)
    }
  })

  it.live("MetricsAddressRefusedAtStart: a bad BOTHY_METRICS_ADDRESS stops the worker with one line naming it", () =>
    Effect.gen(function* () {
      const out = yield* NodeProcess.run(NodeProcess.bothy, ["worker"], {
        DATABASE_URL: "postgres://nobody@127.0.0.1:1/none",
        BOTHY_WEBHOOK_SECRET_KEY: WorkerProcess.rawKey(),
        BOTHY_METRICS_ADDRESS: "localhost",
      })
      assert.strictEqual(out.code, 1)
      assert.match(
        out.stderr.trim(),
        /^bothy: invalid configuration: BOTHY_METRICS_ADDRESS \(metrics\.address\) = "localhost": expected host:port/,
      )
      assert.notInclude(out.stdout, "worker running")
    }),
  )
})

/**
 * What a statement of the code under test really reads: while `effect` runs, every statement whose
 * text matches `pattern` is first run as `EXPLAIN (ANALYZE, FORMAT JSON)` in a savepoint (or a
 * transaction) that is rolled back, then as itself. The plans are kept; `touched` names the tables
 * a plan actually scanned (nodes that ran at least once), so pruning at execution time shows;
 * `planned` the ones it set up.
 */
import { Effect, Schema } from "effect"
import { SqlClient, Statement } from "effect/sql"

class Rollback extends Schema.TaggedError<Rollback>()("Rollback", { plan: Schema.Unknown }) {}

export const explaining = <A, E, R>(pattern: RegExp, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const plans: Array<unknown> = []
    const transformer: Statement.Transformer = (self) => {
      const [text, params] = self.compile()
      if (text.startsWith("EXPLAIN") || !pattern.test(text)) return Effect.succeed(self)
      const explain = sql
        .unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params)
        .pipe(Effect.flatMap((rows) => Effect.fail(new Rollback({ plan: rows[0]!["QUERY PLAN"] }))))
      return sql.withTransaction(explain).pipe(
        Effect.catchTag("Rollback", (r) => Effect.sync(() => plans.push(r.plan))),
        Effect.orDie,
        Effect.as(self),
      )
    }
    const result = yield* Effect.provideService(effect, Statement.CurrentTransformer, transformer)
    return { result, plans }
  })

/** The relations of `plan` whose nodes `keep` accepts, sorted. */
const relations = (plan: unknown, keep: (node: Record<string, unknown>) => boolean): ReadonlyArray<string> => {
  const names = new Set<string>()
  const visit = (node: unknown) => {
    if (Array.isArray(node)) return node.forEach(visit)
    if (typeof node !== "object" || node === null) return
    const n = node as Record<string, unknown>
    if (typeof n["Relation Name"] === "string" && keep(n)) names.add(n["Relation Name"])
    for (const value of Object.values(n)) if (typeof value === "object") visit(value)
  }
  visit(plan)
  return [...names].sort()
}

/** The relations of `plan` whose scan ran at least once. */
export const touched = (plan: unknown) => relations(plan, (n) => Number(n["Actual Loops"] ?? 0) > 0)

/**
 * The relations `plan` sets up, whether or not their scans ran: what pruning while the statement
 * runs cannot spare (pruning at planning or at executor start does).
 */
export const planned = (plan: unknown) => relations(plan, () => true)

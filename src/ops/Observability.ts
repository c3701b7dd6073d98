/**
 * What a bothy process adds to be observed from outside: the database gauges and the `/metrics`
 * endpoint that serves them with every other metric. Built on top of the process's own layers
 * (it needs their pool), so the first scrape already finds every consumer's gauges.
 */
import { Layer } from "effect"
import * as DatabaseGauges from "./DatabaseGauges.ts"
import * as MetricsEndpoint from "./MetricsEndpoint.ts"

export const layer = (address: MetricsEndpoint.MetricsAddress) =>
  MetricsEndpoint.layer(address).pipe(Layer.provideMerge(DatabaseGauges.layer()))

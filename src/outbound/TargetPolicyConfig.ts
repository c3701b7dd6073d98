/**
 * The outbound target policy from configuration (`webhook.allow_*`), shared by everything that
 * reaches the outside: webhook targets and push endpoints pass the same checks. An allow-list
 * entry that does not parse is refused at start: it would match nothing and leave the operator
 * wondering why a target is still refused.
 */
import { Effect } from "effect"
import { envName, InvalidConfig, parseFlag, parseList, setting } from "../platform/BothyConfig.ts"
import { allowHttpLoopbackKey, invalidCidrs, invalidHosts, type TargetPolicy } from "./OutboundTarget.ts"

export const keys = {
  allowHttpLoopback: allowHttpLoopbackKey,
  allowCidrs: "webhook.allow_cidrs",
  allowHosts: "webhook.allow_hosts",
} as const

/** Refuses allow-list entries that do not parse. */
export const check = (policy: TargetPolicy): Effect.Effect<TargetPolicy, InvalidConfig> => {
  const bad = (key: "allowCidrs" | "allowHosts", entries: ReadonlyArray<string>, expected: string) =>
    new InvalidConfig({
      keys: [keys[key]],
      detail: `${envName(keys[key])} (${keys[key]}): ${entries.map((e) => JSON.stringify(e)).join(", ")} ${entries.length === 1 ? "is" : "are"} not ${expected}`,
    })
  const cidrs = invalidCidrs(policy.allowCidrs)
  if (cidrs.length > 0)
    return Effect.fail(bad("allowCidrs", cidrs, "an IP address or CIDR range (10.1.0.0/16, fd00::/8)"))
  const hosts = invalidHosts(policy.allowHosts)
  if (hosts.length > 0)
    return Effect.fail(bad("allowHosts", hosts, "a host name or IP address (no port, path or wildcard)"))
  return Effect.succeed(policy)
}

/** The policy from the environment, checked. */
export const load: Effect.Effect<TargetPolicy, InvalidConfig> = Effect.gen(function* () {
  return yield* check({
    allowHttpLoopback: yield* setting(keys.allowHttpLoopback, "false", parseFlag),
    allowCidrs: yield* setting(keys.allowCidrs, "", parseList),
    allowHosts: yield* setting(keys.allowHosts, "", parseList),
  })
})

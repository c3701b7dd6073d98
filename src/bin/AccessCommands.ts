/**
 * `bothy grants|members|mutes ...`: the operator's hands on bothy's default models of who may
 * receive (`permission_grants`) and who is notified (`space_members`, `notification_preferences`),
 * straight on the database, as the admin API's `/v1/access` routes are over HTTP. These rows decide
 * only for a worker that runs bothy's default `Permissions` and `PushAudience`, as `bothy worker`
 * does; a host app that replaced a model manages it where it keeps it.
 */
import { Console, Effect, Option, Schema } from "effect"
import { Command, Flag } from "effect/cli"
import * as PermissionGrants from "../authz/PermissionGrants.ts"
import { pushDeliver, webhookDeliver } from "../authz/Permissions.ts"
import * as PushAudience from "../push/PushAudience.ts"
import { json, withDatabase } from "./AdminCommandRuntime.ts"

const principal = Flag.String("principal").pipe(Flag.withDescription("the principal (a user, a team, a tenant)"))
const space = Flag.String("space").pipe(Flag.withDescription("the space"))
const action = Flag.Literals("action", [webhookDeliver, pushDeliver]).pipe(
  Flag.withDescription(`what it may receive: ${webhookDeliver} (webhooks) or ${pushDeliver} (push)`),
)
const optional = <A>(flag: Flag.Flag<A>, description: string) =>
  flag.pipe(Flag.withDescription(description), Flag.optional, Flag.map(Option.getOrUndefined))
const eventType = Flag.String("type")

const lines = <A>(rows: ReadonlyArray<A>, asJson: boolean, line: (row: A) => string) =>
  Console.log(
    asJson ? JSON.stringify({ items: rows }, null, 2) : rows.length === 0 ? "none" : rows.map(line).join("\n"),
  )

const grants = Command.make("grants").pipe(
  Command.withDescription("Rights of the default Permissions model: who may receive what on which space"),
  Command.withSubcommands([
    Command.make("add", { principal, action, space }, (g) =>
      withDatabase(PermissionGrants.grant(g.principal, g.action, g.space)).pipe(
        Effect.andThen(Console.log(`${g.principal} may receive ${g.action} on space ${g.space}`)),
      ),
    ).pipe(Command.withDescription("Grant a right")),
    Command.make("remove", { principal, action, space }, (g) =>
      withDatabase(PermissionGrants.revoke(g.principal, g.action, g.space)).pipe(
        Effect.andThen(Console.log(`${g.principal} may no longer receive ${g.action} on space ${g.space}`)),
      ),
    ).pipe(Command.withDescription("Revoke a right; deliveries not sent yet go dead without a request")),
    Command.make(
      "list",
      {
        principal: optional(Flag.String("principal"), "only this principal's"),
        space: optional(Flag.String("space"), "only on this space"),
        json,
      },
      (q) =>
        withDatabase(PermissionGrants.list(q, 500)).pipe(
          Effect.flatMap((rows) => lines(rows, q.json, (g) => `${g.principal}\t${g.action}\t${g.space}`)),
        ),
    ).pipe(Command.withDescription("List rights (500 at most)")),
  ]),
)

const members = Command.make("members").pipe(
  Command.withDescription("Space membership of the default push audience: who is notified of a space's events"),
  Command.withSubcommands([
    Command.make("add", { space, principal }, (m) =>
      withDatabase(PushAudience.join(m.space, m.principal)).pipe(
        Effect.andThen(Console.log(`${m.principal} is a member of space ${m.space}`)),
      ),
    ).pipe(Command.withDescription("Add a member to a space")),
    Command.make("remove", { space, principal }, (m) =>
      withDatabase(PushAudience.leave(m.space, m.principal)).pipe(
        Effect.andThen(Console.log(`${m.principal} is no longer a member of space ${m.space}`)),
      ),
    ).pipe(Command.withDescription("Remove a member from a space")),
    Command.make(
      "list",
      {
        space: optional(Flag.String("space"), "only this space's"),
        principal: optional(Flag.String("principal"), "only this principal's spaces"),
        json,
      },
      (q) =>
        withDatabase(PushAudience.members(q, 500)).pipe(
          Effect.flatMap((rows) => lines(rows, q.json, (m) => `${m.space}\t${m.principal}`)),
        ),
    ).pipe(Command.withDescription("List members (500 at most)")),
  ]),
)

const muteFlags = {
  principal,
  space: optional(Flag.String("space"), "the space muted"),
  type: optional(eventType, "the event type muted (in --space, or everywhere)"),
}

/** `bothy mutes add` with neither `--space` nor `--type`: it would mute nothing. */
export class MuteNamesNothing extends Schema.TaggedError<MuteNamesNothing>()("MuteNamesNothing", {}) {
  override get message() {
    return "a mute names --space, --type, or both"
  }
}

/** What a mute names: a space, a type, or both; neither is refused before the database is opened. */
const muted = (m: {
  readonly space: string | undefined
  readonly type: string | undefined
}): Effect.Effect<Parameters<typeof PushAudience.mute>[1], MuteNamesNothing> =>
  m.space !== undefined
    ? Effect.succeed({ space: m.space, ...(m.type === undefined ? {} : { type: m.type }) })
    : m.type !== undefined
      ? Effect.succeed({ type: m.type })
      : Effect.fail(new MuteNamesNothing())

const mutes = Command.make("mutes").pipe(
  Command.withDescription("Mutes of the default push audience: a space, an event type, or a type in a space"),
  Command.withSubcommands([
    Command.make("add", muteFlags, (m) =>
      Effect.flatMap(muted(m), (what) => withDatabase(PushAudience.mute(m.principal, what))).pipe(
        Effect.andThen(Console.log(`muted for ${m.principal}`)),
      ),
    ).pipe(Command.withDescription("Mute a space, an event type, or a type in a space")),
    Command.make("remove", muteFlags, (m) =>
      withDatabase(PushAudience.unmute(m.principal, m)).pipe(Effect.andThen(Console.log(`unmuted for ${m.principal}`))),
    ).pipe(Command.withDescription("Lift a mute (the same --space and --type)")),
    Command.make("list", { principal: optional(Flag.String("principal"), "only this principal's"), json }, (q) =>
      withDatabase(PushAudience.mutes(q, 500)).pipe(
        Effect.flatMap((rows) => lines(rows, q.json, (m) => `${m.principal}\t${m.space ?? "*"}\t${m.type ?? "*"}`)),
      ),
    ).pipe(Command.withDescription("List mutes (500 at most)")),
  ]),
)

export const all = [grants, members, mutes] as const

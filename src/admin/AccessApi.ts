/**
 * The default models of who may and who wants to receive, in the operator's hands: rights
 * (`permission_grants`: a principal may receive an action's consequences on a space), space
 * membership (`space_members`: who the default push audience notifies) and mutes
 * (`notification_preferences`). Without these, a subscription or registration made through the
 * API alone sends nothing until code writes a grant.
 *
 * What it keeps true: these rows decide only where bothy's default models are in use. A server
 * whose host replaced `Permissions` (or `PushAudience`) answers 409 `ModelReplaced` instead of
 * writing rows that would decide nothing. Operator only: a right is not a principal's to grant.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { pushDeliver, webhookDeliver } from "../authz/Permissions.ts"
import { storableCheck } from "../platform/StorableText.ts"
import { OperatorOnly } from "./AdminErrors.ts"
import { Limit } from "./AdminSchemas.ts"

/** A host replaced the default model these rows belong to: they would decide nothing. */
export class ModelReplaced extends Schema.TaggedError<ModelReplaced>()(
  "ModelReplaced",
  { model: Schema.String, detail: Schema.String },
  { httpApiStatus: 409 },
) {
  override get message() {
    return `this server's ${this.model} is the host's own, not bothy's default model: ${this.detail}`
  }
}

const Text = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(200), storableCheck)

/** The actions bothy asks `Permissions` about. */
export const Action = Schema.Literals([webhookDeliver, pushDeliver])

export const Grant = Schema.Struct({ principal: Text, action: Action, space: Text }).annotate({ identifier: "Grant" })
/** A grant as stored: a host's own code may grant actions of its own. */
const GrantRow = Schema.Struct({ principal: Schema.String, action: Schema.String, space: Schema.String }).annotate({
  identifier: "GrantRow",
})
export const Member = Schema.Struct({ space: Text, principal: Text }).annotate({ identifier: "Member" })
/** A space, an event type everywhere, or a type in a space (at least one of the two). */
export const Mute = Schema.Struct({
  principal: Text,
  space: Schema.optional(Schema.NullOr(Text)),
  type: Schema.optional(Schema.NullOr(Text)),
}).annotate({ identifier: "Mute" })

const items = <S extends Schema.Top>(identifier: string, item: S) =>
  Schema.Struct({ items: Schema.Array(item) }).annotate({ identifier })

const errors = [OperatorOnly, ModelReplaced]

export class AccessApi extends HttpApiGroup.make("access")
  .add(
    HttpApiEndpoint.get("grants", "/grants", {
      query: { principal: Schema.optional(Text), space: Schema.optional(Text), limit: Limit },
      success: items("GrantList", GrantRow),
      error: errors,
    }),
    HttpApiEndpoint.post("grant", "/grants", { payload: Grant, success: Grant, error: errors }),
    HttpApiEndpoint.delete("revoke", "/grants", { query: Grant.fields, error: errors }),
    HttpApiEndpoint.get("members", "/members", {
      query: { space: Schema.optional(Text), principal: Schema.optional(Text), limit: Limit },
      success: items("MemberList", Member),
      error: errors,
    }),
    HttpApiEndpoint.post("join", "/members", { payload: Member, success: Member, error: errors }),
    HttpApiEndpoint.delete("leave", "/members", { query: Member.fields, error: errors }),
    HttpApiEndpoint.get("mutes", "/mutes", {
      query: { principal: Schema.optional(Text), limit: Limit },
      success: items("MuteList", Mute),
      error: errors,
    }),
    HttpApiEndpoint.post("mute", "/mutes", { payload: Mute, success: Mute, error: errors }),
    HttpApiEndpoint.delete("unmute", "/mutes", {
      query: { principal: Text, space: Schema.optional(Text), type: Schema.optional(Text) },
      error: errors,
    }),
  )
  .prefix("/v1/access")
  .annotateMerge(
    OpenApi.annotations({
      title: "access",
      description:
        "Rights, space membership and mutes of bothy's default models (operator only; 409 where a host replaced the model)",
    }),
  ) {}

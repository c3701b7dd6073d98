/**
 * Portal links: a host's back end asks for a short-lived, signed link that opens the tenant portal
 * (`/console`) as one principal, and puts it in an iframe or a new tab. The operator's alone: a
 * link is a session as that principal.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { storableCheck } from "../platform/StorableText.ts"
import { OperatorOnly } from "./AdminErrors.ts"

/** The admin server serves no console here (the routes are mounted without it). */
export class PortalUnavailable extends Schema.TaggedError<PortalUnavailable>()(
  "PortalUnavailable",
  { detail: Schema.String },
  { httpApiStatus: 501 },
) {
  override get message() {
    return `no portal: ${this.detail}`
  }
}

export const PortalLinkRequest = Schema.Struct({
  principal: Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(200), storableCheck),
  /** How long the link, and the session it opens, last: 60 s to a day (15 minutes by default). */
  expiresInSeconds: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 60, maximum: 86_400 }))),
}).annotate({ identifier: "PortalLinkRequest" })

export const PortalLink = Schema.Struct({
  /** The link on the host the request came to. */
  url: Schema.String,
  /** The same link as a path, for a host that knows the console's address better. */
  path: Schema.String,
  expiresAt: Schema.String,
}).annotate({ identifier: "PortalLink" })

export class PortalLinksApi extends HttpApiGroup.make("portalLinks")
  .add(
    HttpApiEndpoint.post("create", "/", {
      payload: PortalLinkRequest,
      success: PortalLink,
      error: [OperatorOnly, PortalUnavailable],
    }),
  )
  .prefix("/v1/portal-links")
  .annotateMerge(
    OpenApi.annotations({
      title: "portal links",
      description: "A short-lived, signed link that opens the tenant portal as one principal (operator only)",
    }),
  ) {}

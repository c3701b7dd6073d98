/**
 * What every admin request goes through besides its caller's check (`AdminAuth`), as two HttpApi
 * middlewares that `AdminApi` declares, so the OpenAPI document lists their answers too:
 *
 * - `RequestBodies`: a body is at most `admin.max_body_bytes` (`BOTHY_ADMIN_MAX_BODY_BYTES`, 1 MiB
 *   by default). A larger `content-length` is a 413 before any of the body is read; a body sent
 *   without one is cut off with the same 413 as soon as it passes the limit, so no request holds
 *   more than the limit in memory. An endpoint that takes no body refuses one that carries fields
 *   (`{"fromSeq": 5}` posted to `enable`, where it belongs in the query), as the endpoints that take
 *   one refuse unknown fields: a 400 naming them.
 * - `Unexpected`: a failure no client can act on (a database error, a response that does not
 *   encode, a bug) is one log line naming the endpoint and the request id, and a 500 whose JSON body
 *   carries that id (`InternalError`). The id is the request's `x-request-id` when it sends a sane
 *   one (a proxy's), else a new UUID; every log line of the request carries it, and so does the
 *   response's `x-request-id` header on success.
 */
import { randomUUID } from "node:crypto"
import { ByteSize, Cause, Effect, Layer, type Types } from "effect"
import { HttpIncomingMessage, HttpMethod, HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiError, HttpApiMiddleware } from "effect/http-api"
import { InternalError, InvalidRequest, PayloadTooLarge } from "./AdminErrors.ts"

/** `admin.max_body_bytes`' default: 1 MiB, far above any request the API takes. */
export const defaultMaxBodyBytes = 1_048_576

export class RequestBodies extends HttpApiMiddleware.Service<RequestBodies>()("bothy/admin/RequestBodies", {
  error: [PayloadTooLarge, InvalidRequest],
}) {}

const tooLarge = (limit: number, detail: string) =>
  new PayloadTooLarge({ limit, detail: `${detail}; the limit is ${limit} bytes (admin.max_body_bytes)` })

/** A body that a read cut off at `MaxBodySize` (the platform's own error, a defect of the read). */
const isBodyTooLarge = (defect: unknown): boolean =>
  typeof defect === "object" &&
  defect !== null &&
  "reason" in defect &&
  typeof defect.reason === "object" &&
  defect.reason !== null &&
  "_tag" in defect.reason &&
  defect.reason._tag === "RequestParseError" &&
  "reason" in defect.reason &&
  defect.reason.reason === "BodyTooLarge"

/** The fields of a body sent to an endpoint that takes none; an empty body, `{}` and `null` are fine. */
const refuseBody = (text: string): Effect.Effect<void, InvalidRequest> => {
  if (text.trim() === "") return Effect.void
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return Effect.fail(new InvalidRequest({ field: "payload", detail: "this endpoint takes no request body" }))
  }
  if (json === null) return Effect.void
  if (typeof json !== "object" || Array.isArray(json)) {
    return Effect.fail(new InvalidRequest({ field: "payload", detail: "this endpoint takes no request body" }))
  }
  const keys = Object.keys(json)
  if (keys.length === 0) return Effect.void
  return Effect.fail(
    new InvalidRequest({
      field: `payload.${keys[0]}`,
      detail: `unknown field${keys.length === 1 ? "" : "s"} ${keys.map((k) => `payload.${k}`).join(", ")}: this endpoint takes no request body (query parameters go in the URL)`,
    }),
  )
}

/** `RequestBodies` with its limit in bytes. */
export const requestBodiesLayer = (maxBytes: number) =>
  Layer.succeed(RequestBodies, (httpEffect, { endpoint }) =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const declared = request.headers["content-length"]
      if (declared !== undefined && Number(declared) > maxBytes) {
        return yield* tooLarge(maxBytes, `content-length is ${declared} bytes`)
      }
      const hasBody =
        HttpMethod.hasBody(request.method) &&
        ((declared !== undefined && Number(declared) > 0) || request.headers["transfer-encoding"] !== undefined)
      const checked =
        endpoint.payload.size === 0 && hasBody
          ? Effect.andThen(Effect.flatMap(Effect.orDie(request.text), refuseBody), httpEffect)
          : httpEffect
      return yield* checked.pipe(
        Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(maxBytes)),
        Effect.catchDefect((defect) =>
          isBodyTooLarge(defect)
            ? Effect.fail(tooLarge(maxBytes, "the body passed the limit while it was read"))
            : Effect.die(defect),
        ),
      )
    }),
  )

export class Unexpected extends HttpApiMiddleware.Service<Unexpected>()("bothy/admin/Unexpected", {
  error: InternalError,
}) {}

const saneRequestId = /^[A-Za-z0-9._:-]{1,128}$/

/** The request's own `x-request-id` when it is a plain token, else a new UUID. */
export const requestIdOf = (request: HttpServerRequest.HttpServerRequest): string => {
  const given = request.headers["x-request-id"]
  return given !== undefined && saneRequestId.test(given) ? given : randomUUID()
}

/** What went wrong, in one line: the error's name and the messages down its causes, never a stack. */
const oneLine = (cause: Cause.Cause<unknown>): string => {
  const squashed = Cause.squash(cause)
  if (!(squashed instanceof Error)) return String(squashed).replaceAll(/\s+/g, " ").slice(0, 500)
  const messages: Array<string> = []
  let at: unknown = squashed
  while (at instanceof Error && messages.length < 5) {
    if (at.message !== "" && !messages.includes(at.message)) messages.push(at.message)
    at = at.cause
  }
  return `${squashed.name}: ${messages.join(": ")}`.replaceAll(/\s+/g, " ").slice(0, 500)
}

/** Defects the platform answers itself: a response, or a request it could not read (400, 413). */
const answered = (defect: unknown): boolean =>
  HttpServerResponse.isHttpServerResponse(defect) ||
  (typeof defect === "object" && defect !== null && "_tag" in defect && defect._tag === "HttpServerError")

export const unexpectedLayer = Layer.succeed(Unexpected, (httpEffect, { endpoint, group }) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const requestId = requestIdOf(request)
    const unexpected = (cause: Cause.Cause<unknown>): Effect.Effect<never, InternalError> =>
      Effect.andThen(
        Effect.logError(
          `admin API: unexpected failure in ${group.identifier}.${endpoint.identifier} (${request.method} ${request.url}, request ${requestId}): ${oneLine(cause)}`,
        ),
        Effect.fail(new InternalError({ requestId, detail: "the server logged this failure under the request id" })),
      )
    return yield* httpEffect.pipe(
      Effect.map(HttpServerResponse.setHeader("x-request-id", requestId)),
      Effect.catchCause((cause): Effect.Effect<never, unknown> => {
        if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
        const defect = Cause.findDefect(cause)
        if (defect._tag === "Success") return answered(defect.success) ? Effect.failCause(cause) : unexpected(cause)
        const error = Cause.findError(cause)
        // A response that does not encode is the server's fault, not the client's.
        if (
          error._tag === "Success" &&
          HttpApiError.HttpApiSchemaError.is(error.success) &&
          (error.success.kind === "Body" || error.success.kind === "ResponseHeaders")
        ) {
          return unexpected(cause)
        }
        return Effect.failCause(cause)
      }),
      Effect.annotateLogs({ requestId }),
    ) as Effect.Effect<HttpServerResponse.HttpServerResponse, InternalError | Types.unhandled>
  }),
)

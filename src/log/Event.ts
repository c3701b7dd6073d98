/**
 * What a producer appends and what a reader gets back.
 *
 * Validation happens before any SQL runs, so a bad event appends nothing, including the good
 * events of the same batch, and the error names the event (`index`) and its field. "Bad" includes
 * values JSON can encode but PostgreSQL cannot hold (a NUL character, an unpaired UTF-16
 * surrogate, in any text field or anywhere in the payload, keys too) and payloads nested deeper
 * than `maxPayloadDepth`: they would otherwise fail late, inside the commit phase that serializes
 * every producer, or overflow the stack.
 */
import { Option, Result, Schema } from "effect"
import { firstIssue } from "../platform/FieldIssue.ts"
import * as StorableJson from "../platform/StorableJson.ts"
import { storableCheck } from "../platform/StorableText.ts"

/** Payloads are capped so that a webhook envelope (hard cap 64 KB) always has room for them. */
export const maxPayloadBytes = 60 * 1024

/** How deep arrays and objects may nest in a payload (`{}` is 1, `{"a":[]}` is 2). */
export const maxPayloadDepth = 64

export const maxTextLength = 200

const Text = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(maxTextLength), storableCheck)

/**
 * What an event type may be: letters, digits and `_.:-`, starting with a letter or digit. A
 * webhook subscription's event types follow the same rule (and match exactly: no wildcards).
 */
export const eventTypePattern = /^[A-Za-z0-9][A-Za-z0-9_.:-]*$/

export const EventType = Schema.String.check(
  Schema.isNonEmpty(),
  Schema.isMaxLength(maxTextLength),
  Schema.isPattern(eventTypePattern, {
    message: "must be letters, digits and _.:- starting with a letter or digit (no spaces, no wildcards)",
  }),
)

/** An event as a producer hands it to `EventLog.append`. */
export const NewEvent = Schema.Struct({
  space: Text,
  type: EventType,
  actor: Text,
  payload: Schema.Json,
})
export type NewEvent = typeof NewEvent.Type

/** An event as the log holds it. `seq` is gapless and commit-ordered within the installation. */
export const Event = Schema.Struct({
  seq: Schema.BigInt,
  epoch: Schema.Int,
  occurredAt: Schema.Date,
  space: Schema.String,
  type: Schema.String,
  actor: Schema.String,
  payload: Schema.Json,
  traceParent: Schema.NullOr(Schema.String),
})
export type Event = typeof Event.Type

export class InvalidEvent extends Schema.TaggedError<InvalidEvent>()("InvalidEvent", {
  /** Position of the offending event in the batch that was rejected. */
  index: Schema.Int,
  reason: Schema.Literals([
    "Malformed",
    "PayloadTooLarge",
    "PayloadTooDeep",
    "PayloadNotStorable",
    "EmptyBatch",
    "SchemaMismatch",
    "BatchTooLarge",
  ]),
  /** The offending field (`type`, `payload.items[3]`); empty when the event is not an object, absent for `EmptyBatch`. */
  field: Schema.optional(Schema.String),
  /** For `SchemaMismatch`: where in the type's JSON Schema (`#/properties/amount/type`), from the event-type catalog. */
  schemaPath: Schema.optional(Schema.String),
  detail: Schema.String,
}) {
  override get message() {
    const at = this.field === undefined || this.field === "" ? "" : ` at ${this.field}`
    return `event ${this.index} rejected (${this.reason})${at}: ${this.detail}`
  }
}

const decodeNewEvent = Schema.decodeUnknownResult(NewEvent)

const payloadReason = {
  TooDeep: "PayloadTooDeep",
  TooManyValues: "PayloadTooLarge",
  NotStorable: "PayloadNotStorable",
} as const satisfies Record<StorableJson.Problem["_tag"], InvalidEvent["reason"]>

/** Checks one event and returns it with its payload serialized for the statement. */
export const validate = (input: unknown, index: number): Result.Result<readonly [NewEvent, string], InvalidEvent> => {
  const decoded = decodeNewEvent(input)
  if (Result.isFailure(decoded)) {
    return Result.fail(new InvalidEvent({ index, reason: "Malformed", ...firstIssue(decoded.failure) }))
  }
  const event = decoded.success
  // Before JSON.stringify, which recurses: this walk cannot overflow. Each value takes at least
  // a byte of JSON, so more values than the byte limit can never fit.
  const problem = StorableJson.check(event.payload, "payload", {
    maxDepth: maxPayloadDepth,
    maxValues: maxPayloadBytes,
  })
  if (Option.isSome(problem)) {
    const { _tag, field, detail } = problem.value
    return Result.fail(new InvalidEvent({ index, reason: payloadReason[_tag], field, detail }))
  }
  const json = JSON.stringify(event.payload)
  const bytes = Buffer.byteLength(json, "utf8")
  if (bytes > maxPayloadBytes) {
    return Result.fail(
      new InvalidEvent({
        index,
        reason: "PayloadTooLarge",
        field: "payload",
        detail: `payload is ${bytes} bytes as JSON; the limit is ${maxPayloadBytes}`,
      }),
    )
  }
  return Result.succeed([event, json] as const)
}

/** Validates a whole batch; the first bad event fails it. */
export const validateBatch = (
  inputs: ReadonlyArray<unknown>,
): Result.Result<ReadonlyArray<readonly [NewEvent, string]>, InvalidEvent> => {
  if (inputs.length === 0) {
    return Result.fail(
      new InvalidEvent({ index: 0, reason: "EmptyBatch", detail: "an append needs at least one event" }),
    )
  }
  const out: Array<readonly [NewEvent, string]> = []
  for (let i = 0; i < inputs.length; i++) {
    const one = validate(inputs[i], i)
    if (Result.isFailure(one)) return Result.fail(one.failure)
    out.push(one.success)
  }
  return Result.succeed(out)
}

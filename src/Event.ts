/**
 * What a producer appends and what a reader gets back.
 *
 * Validation happens before any SQL runs, so a bad event appends nothing, including the good
 * events of the same batch. "Bad" includes values JSON can encode but `jsonb` cannot hold (a NUL
 * character, an unpaired UTF-16 surrogate): they would otherwise fail late, inside the commit
 * phase that serializes every producer.
 */
import { Result, Schema } from "effect"

/** Payloads are capped so that a webhook envelope (hard cap 64 KB) always has room for them. */
export const maxPayloadBytes = 60 * 1024

const maxTextLength = 200

const Text = Schema.String.check(Schema.isNonEmpty(), Schema.isMaxLength(maxTextLength))

/** An event as a producer hands it to `EventLog.append`. */
export const NewEvent = Schema.Struct({
  space: Text,
  type: Text.check(Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9_.:-]*$/)),
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
  reason: Schema.Literals(["Malformed", "PayloadTooLarge", "PayloadNotStorable", "EmptyBatch"]),
  detail: Schema.String,
}) {
  override get message() {
    return `event ${this.index} rejected (${this.reason}): ${this.detail}`
  }
}

// JSON.stringify escapes NUL and lone surrogates as \uXXXX; an even run of backslashes before the
// escape means it is a real escape and not an escaped backslash followed by "u0000".
const unstorableEscape = /(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i

const decodeNewEvent = Schema.decodeUnknownResult(NewEvent)

/** Checks one event and returns it with its payload serialized for the statement. */
export const validate = (input: unknown, index: number): Result.Result<readonly [NewEvent, string], InvalidEvent> => {
  const decoded = decodeNewEvent(input)
  if (Result.isFailure(decoded)) {
    return Result.fail(new InvalidEvent({ index, reason: "Malformed", detail: String(decoded.failure) }))
  }
  const event = decoded.success
  const json = JSON.stringify(event.payload)
  const bytes = Buffer.byteLength(json, "utf8")
  if (bytes > maxPayloadBytes) {
    return Result.fail(
      new InvalidEvent({
        index,
        reason: "PayloadTooLarge",
        detail: `payload is ${bytes} bytes as JSON; the limit is ${maxPayloadBytes}`,
      }),
    )
  }
  if (unstorableEscape.test(json)) {
    return Result.fail(
      new InvalidEvent({
        index,
        reason: "PayloadNotStorable",
        detail: "payload contains a NUL character or an unpaired UTF-16 surrogate, which jsonb cannot hold",
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

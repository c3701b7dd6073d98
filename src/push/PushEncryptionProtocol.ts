/**
 * What a `PushEncryption` thread is asked and answers: the keys and text of some messages
 * (`PushRequest.BodyInput`), and what became of each, in the same order, under the question's id.
 * Only what encryption reads crosses, and only the body comes back: the headers, the endpoint and
 * the VAPID token (the same long text for every message) stay on the caller's thread, where
 * `PushRequest.requestWith` puts them around the body. Every body crosses as a buffer of its own,
 * moved rather than cloned.
 */
import * as PushRequest from "./PushRequest.ts"

export interface Question {
  readonly id: number
  readonly inputs: ReadonlyArray<PushRequest.BodyInput>
}

/** What became of one input. */
export type Built =
  | { readonly body: Uint8Array }
  | { readonly tooLarge: { readonly bytes: number; readonly max: number } }
  | { readonly defect: string }

export type Answer =
  | { readonly id: number; readonly built: ReadonlyArray<Built> }
  | { readonly id: number; readonly defect: string }

// A body of a few hundred bytes is a view on Node's shared 8 KiB pool; cloned, the whole pool would
// cross with it (about 35 µs a message). Copied into a buffer of its own, it is moved, not cloned.
export const buildOne = (input: PushRequest.BodyInput): Built => {
  try {
    const body = PushRequest.bodyOf(input)
    if (body instanceof PushRequest.PushPayloadTooLarge) return { tooLarge: { bytes: body.bytes, max: body.max } }
    return { body: new Uint8Array(body) }
  } catch (error) {
    return { defect: error instanceof Error ? error.message : String(error) }
  }
}

/** The answer to `question` and the buffers it moves. */
export const answer = (question: Question): [Answer, Array<ArrayBuffer>] => {
  const built = question.inputs.map(buildOne)
  const moved = built.flatMap((b) => ("body" in b ? [b.body.buffer as ArrayBuffer] : []))
  return [{ id: question.id, built }, moved]
}

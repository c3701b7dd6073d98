/**
 * What a `PushEncryption` thread is asked and answers: a list of `PushRequest.requestOf` inputs,
 * and what became of each, in the same order, under the question's id. Every body crosses as a
 * buffer of its own, moved rather than cloned.
 */
import type { SendRequest } from "../outbound/OutboundSender.ts"
import * as PushRequest from "./PushRequest.ts"

export interface Question {
  readonly id: number
  readonly inputs: ReadonlyArray<PushRequest.PushRequestInput>
}

/** What became of one input. */
export type Built =
  | { readonly request: SendRequest }
  | { readonly tooLarge: { readonly bytes: number; readonly max: number } }
  | { readonly defect: string }

export type Answer =
  | { readonly id: number; readonly built: ReadonlyArray<Built> }
  | { readonly id: number; readonly defect: string }

// A body of a few hundred bytes is a view on Node's shared 8 KiB pool; cloned, the whole pool would
// cross with it (about 35 µs a message). Copied into a buffer of its own, it is moved, not cloned.
export const buildOne = (input: PushRequest.PushRequestInput): Built => {
  try {
    const request = PushRequest.requestOf(input)
    if (request instanceof PushRequest.PushPayloadTooLarge)
      return { tooLarge: { bytes: request.bytes, max: request.max } }
    return {
      request: { ...request, body: typeof request.body === "string" ? request.body : new Uint8Array(request.body) },
    }
  } catch (error) {
    return { defect: error instanceof Error ? error.message : String(error) }
  }
}

/** The answer to `question` and the buffers it moves. */
export const answer = (question: Question): [Answer, Array<ArrayBuffer>] => {
  const built = question.inputs.map(buildOne)
  const moved = built.flatMap((b) =>
    "request" in b && typeof b.request.body !== "string" ? [b.request.body.buffer as ArrayBuffer] : [],
  )
  return [{ id: question.id, built }, moved]
}

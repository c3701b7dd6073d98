/**
 * The body of a `PushEncryption` thread: each message in is one `PushRequest.requestOf`, each
 * message out its answer under the same id. Nothing else runs here.
 */
import { parentPort } from "node:worker_threads"
import type { SendRequest } from "../outbound/OutboundSender.ts"
import * as PushRequest from "./PushRequest.ts"

export interface Question {
  readonly id: number
  readonly input: PushRequest.PushRequestInput
}

export type Answer =
  | { readonly id: number; readonly request: SendRequest }
  | { readonly id: number; readonly tooLarge: { readonly bytes: number; readonly max: number } }
  | { readonly id: number; readonly defect: string }

const answer = ({ id, input }: Question): Answer => {
  try {
    const request = PushRequest.requestOf(input)
    return request instanceof PushRequest.PushPayloadTooLarge
      ? { id, tooLarge: { bytes: request.bytes, max: request.max } }
      : { id, request }
  } catch (error) {
    return { id, defect: error instanceof Error ? error.message : String(error) }
  }
}

// A body of a few hundred bytes is a view on Node's shared 8 KiB pool; cloned, the whole pool would
// cross with it (about 35 µs a message). Copied into a buffer of its own, it is moved, not cloned.
const post = (reply: Answer) => {
  if (!("request" in reply) || typeof reply.request.body === "string") return parentPort?.postMessage(reply)
  const body = new Uint8Array(reply.request.body)
  parentPort?.postMessage({ id: reply.id, request: { ...reply.request, body } }, [body.buffer])
}

parentPort?.on("message", (question: Question) => post(answer(question)))

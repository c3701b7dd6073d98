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

parentPort?.on("message", (question: Question) => parentPort?.postMessage(answer(question)))

/**
 * A `PushEncryption` thread that dies: it ends itself (`process.exit` in a worker thread ends the
 * thread) on a message whose payload is "die", after answering the others as the real one does.
 */
import { parentPort } from "node:worker_threads"
import type { Question } from "../../src/push/PushEncryptionThread.ts"
import * as PushRequest from "../../src/push/PushRequest.ts"

parentPort?.on("message", (question: Question) => {
  if (question.input.payload === "die") process.exit(3)
  const request = PushRequest.requestOf(question.input)
  if (!(request instanceof PushRequest.PushPayloadTooLarge)) parentPort?.postMessage({ id: question.id, request })
})

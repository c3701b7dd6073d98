/**
 * The body of a `PushEncryption` thread: each question in gets its answer out
 * (`PushEncryptionProtocol`). Nothing else runs here.
 */
import { parentPort } from "node:worker_threads"
import { answer, type Question } from "./PushEncryptionProtocol.ts"

parentPort?.on("message", (question: Question) => {
  const [reply, moved] = answer(question)
  parentPort?.postMessage(reply, moved)
})

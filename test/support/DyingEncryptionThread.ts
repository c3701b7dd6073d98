/**
 * A `PushEncryption` thread that dies: it ends itself (`process.exit` in a worker thread ends the
 * thread) on a question holding a message whose payload is "die", after answering the others as
 * the real one does.
 */
import { parentPort } from "node:worker_threads"
import { answer, type Question } from "../../src/push/PushEncryptionProtocol.ts"

parentPort?.on("message", (question: Question) => {
  if (question.inputs.some((input) => input.payload === "die")) process.exit(3)
  const [reply, moved] = answer(question)
  parentPort?.postMessage(reply, moved)
})

/**
 * The test suite's server started exactly as the global setup starts it (`TestServer.startOrReject`,
 * default locations), in a process of its own, so a test can run it from another installation.
 * Prints `READY <admin url>`; SIGTERM stops the server and exits 0.
 */
import * as TestServer from "./TestServer.ts"

const started = await TestServer.startOrReject()
console.log(`READY ${started.adminUrl}`)
const stop = () => void started.stop().then(() => process.exit(0))
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
// Keeps the process alive until a signal arrives.
setInterval(() => {}, 1 << 30)

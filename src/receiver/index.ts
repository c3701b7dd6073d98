/**
 * `bothy/receiver`: the receiver kit, for the team that receives bothy's webhooks. It stands on
 * `effect` and `standardwebhooks` alone (no database, nothing of the rest of bothy), so a receiver
 * installs it without PostgreSQL anywhere in its process.
 */
export * as FeedClient from "./FeedClient.ts"
export * as FeedWire from "./FeedWire.ts"
export * as Receiver from "./Receiver.ts"
export * as ReceiverStore from "./ReceiverStore.ts"

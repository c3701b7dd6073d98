/**
 * A test event: one a subscription's owner asks for (the console's "send a test event", the admin
 * API's `POST /v1/subscriptions/{id}/test-event`) to watch a delivery go the whole way an event goes:
 * committed to the log, matched by a round, numbered, signed and sent. Named here, in the log, as
 * both consumers treat it apart: only the webhook subscription its payload names takes it, whatever
 * that subscription's types and filter, and push notifies nobody of it.
 */

/** The test event's type (a built-in `bothy.` type, listed in the catalog). */
export const testEventType = "bothy.subscription.test"

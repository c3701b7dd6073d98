/**
 * The admin API's work from a terminal, against the database alone (no worker needs to run):
 * `bothy subscriptions ...`, `bothy deliveries ...`, `bothy registrations ...`, `bothy event-types
 * ...`. Each command calls
 * the service the API's handler calls (`WebhookSubscriptions`, `WebhookDeliveries`,
 * `DeliveryResend`, `PushRegistrations`), as the operator; tables for people, `--json` (the API's
 * shapes, from `AdminSchemas`) for scripts.
 *
 * No command migrates: each first checks that the schema is at this bothy's latest migration
 * (`Database.checkMigrated`) and otherwise stops with one line naming the missing migration and
 * saying to run `bothy migrate`. A newer CLI must not upgrade a database under an older fleet,
 * whether the command reads or writes (a write against an older schema would fail half-way
 * anyway); upgrading is `bothy migrate`'s decision, taken with the workers. A re-send or a
 * recovery makes deliveries pending; a running worker sends them.
 */
import { deliveries } from "./DeliveryCommands.ts"
import { eventTypes } from "./EventTypeCommands.ts"
import { registrations } from "./RegistrationCommands.ts"
import { subscriptions } from "./SubscriptionCommands.ts"

export { loadWebhookSettings } from "./AdminCommandRuntime.ts"

/** The command groups, for `bothy`'s subcommands. */
export const all = [subscriptions, deliveries, registrations, eventTypes] as const

import { Console, Effect, Schema } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as AdminSchemas from "../admin/AdminSchemas.ts"
import * as StatusReport from "../ops/StatusReport.ts"
import { firstIssue } from "../platform/FieldIssue.ts"
import * as PushConfig from "../push/PushConfig.ts"
import * as PushRegistration from "../push/PushRegistration.ts"
import * as PushRegistrations from "../push/PushRegistrations.ts"
import { json, print, withDatabase } from "./AdminCommandRuntime.ts"

const registrationRows = (rs: ReadonlyArray<PushRegistrations.StoredRegistration>) =>
  rs.length === 0
    ? "  none"
    : StatusReport.grid(
        ["id", "principal", "endpoint", "refreshed"],
        rs.map((r) => [r.id, r.principal, r.endpoint, r.refreshedAt.toISOString()]),
      )

const createRegistration = Command.make(
  "create",
  {
    principal: Flag.String("principal").pipe(Flag.withDescription("who receives the pushes")),
    subscription: Flag.String("subscription").pipe(
      Flag.withDescription("the browser's PushSubscription.toJSON(), as JSON"),
      Flag.withSchema(Schema.fromJsonString(Schema.Unknown)),
    ),
    json,
  },
  ({ principal, subscription, json }) =>
    Effect.gen(function* () {
      // The API's shape, as strictly as the API reads it: a misspelt key is named, never dropped.
      const input = yield* Schema.decodeUnknownEffect(AdminSchemas.PushSubscriptionJson)(subscription, {
        onExcessProperty: "error",
        errors: "all",
      }).pipe(
        Effect.mapError(
          (e) => new PushRegistration.InvalidPushRegistration({ ...firstIssue(e, "subscription"), reason: "BadShape" }),
        ),
      )
      // Registering checks the endpoint against the push-service hosts: push must be on.
      const settings = yield* PushConfig.loadOn
      const registered = yield* PushRegistrations.register(principal, input).pipe(
        Effect.provideService(PushConfig.PushConfig, settings),
      )
      yield* print(
        AdminSchemas.Registered,
        registered,
        json,
        () => `registration ${registered.id} ${registered.created ? "created" : "refreshed"} for ${principal}`,
      )
    }).pipe(withDatabase),
).pipe(Command.withDescription("Register a browser's push subscription for a principal"))

const listRegistrations = Command.make(
  "list",
  { principal: Flag.String("principal").pipe(Flag.withDescription("whose registrations")), json },
  ({ principal, json }) =>
    Effect.gen(function* () {
      const rs = yield* PushRegistrations.list(principal)
      yield* print(Schema.Array(AdminSchemas.Registration), rs, json, () => registrationRows(rs))
    }).pipe(withDatabase),
).pipe(Command.withDescription("List a principal's push registrations"))

const removeRegistration = Command.make(
  "delete",
  { id: Argument.String("id").pipe(Argument.withDescription("the registration's id")), json },
  ({ id, json }) =>
    Effect.gen(function* () {
      yield* PushRegistrations.remove(id)
      yield* json ? Console.log(JSON.stringify({ deleted: id })) : Console.log(`registration ${id} deleted`)
    }).pipe(withDatabase),
).pipe(Command.withDescription("Delete a push registration"))

export const registrations = Command.make("registrations").pipe(
  Command.withDescription("Web Push registrations"),
  Command.withSubcommands([createRegistration, listRegistrations, removeRegistration]),
)

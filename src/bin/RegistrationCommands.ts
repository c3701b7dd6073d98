import { Console, Effect, Option, Schema } from "effect"
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
        ["id", "principal", "kind", "endpoint or device", "refreshed"],
        rs.map((r) => [
          r.id,
          r.principal,
          r.kind,
          r.endpoint ?? (r.kind === "apns" ? `${r.token} (${r.topic}, ${r.environment})` : (r.token ?? "")),
          r.refreshedAt.toISOString(),
        ]),
      )

const optional = <A>(flag: Flag.Flag<A>, description: string) =>
  flag.pipe(Flag.withDescription(description), Flag.optional, Flag.map(Option.getOrUndefined))

/** A browser's subscription, checked as strictly as the API reads it: a misspelt key is named, never dropped. */
const registerBrowser = (principal: string, subscription: unknown) =>
  Effect.gen(function* () {
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
    return yield* PushRegistrations.register(principal, input).pipe(
      Effect.provideService(PushConfig.PushConfig, settings),
    )
  })

const createRegistration = Command.make(
  "create",
  {
    principal: Flag.String("principal").pipe(Flag.withDescription("who receives the pushes")),
    subscription: optional(
      Flag.String("subscription").pipe(Flag.withSchema(Schema.fromJsonString(Schema.Unknown))),
      "a browser's PushSubscription.toJSON(), as JSON",
    ),
    apnsToken: optional(Flag.String("apns-token"), "an iOS device's APNs token (hex)"),
    topic: optional(Flag.String("topic"), "with --apns-token: the app's bundle id"),
    environment: Flag.ChoiceWithValue("environment", [
      ["sandbox", "sandbox"],
      ["production", "production"],
    ] as const).pipe(
      Flag.withDescription("with --apns-token: the device's APNs environment"),
      Flag.withDefault("production"),
    ),
    fcmToken: optional(Flag.String("fcm-token"), "an app's FCM registration token"),
    json,
  },
  ({ principal, subscription, apnsToken, topic, environment, fcmToken, json }) =>
    Effect.gen(function* () {
      const given = [subscription, apnsToken, fcmToken].filter((x) => x !== undefined).length
      if (given !== 1) {
        return yield* new PushRegistration.InvalidPushRegistration({
          field: "",
          reason: "BadShape",
          detail: "give exactly one of --subscription, --apns-token, --fcm-token",
        })
      }
      const registered =
        apnsToken !== undefined
          ? yield* PushRegistrations.registerNative(principal, "apns", {
              token: apnsToken,
              topic: topic ?? "",
              environment,
            })
          : fcmToken !== undefined
            ? yield* PushRegistrations.registerNative(principal, "fcm", { token: fcmToken })
            : yield* registerBrowser(principal, subscription)
      yield* print(
        AdminSchemas.Registered,
        registered,
        json,
        () => `registration ${registered.id} ${registered.created ? "created" : "refreshed"} for ${principal}`,
      )
    }).pipe(withDatabase),
).pipe(Command.withDescription("Register a browser's push subscription, or an iOS or Android device, for a principal"))

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
  Command.withDescription("Push registrations: browsers, APNs and FCM devices"),
  Command.withSubcommands([createRegistration, listRegistrations, removeRegistration]),
)

/**
 * Where the embedded server's cluster lives. Keeps true: the folder is one the server's OS user can
 * reach, and a cluster, once created, is found in the same place at every later start.
 *
 * That is the folder asked for (`BOTHY_HOME/pg`), except when running as root with a folder above it
 * that the OS user `postgres` cannot enter (a clone under `/root`, a `mktemp -d` folder): then the
 * cluster lives in `/var/lib/bothy/<name derived from the folder asked for>`, the same name for the
 * same folder at every start, and a cluster already there is used first. The user's own folders are
 * never chmodded.
 */
import { createHash } from "node:crypto"
import { chmodSync, existsSync, mkdirSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { Effect, Schema } from "effect"
import { canEnter, type ServerUser } from "./EmbeddedServerUser.ts"

export class EmbeddedDataUnreachable extends Schema.TaggedError<EmbeddedDataUnreachable>()("EmbeddedDataUnreachable", {
  dataDir: Schema.String,
  detail: Schema.String,
}) {
  override get message() {
    return `the embedded PostgreSQL cannot use its data in ${this.dataDir}: ${this.detail}`
  }
}

export interface Placed {
  /** The cluster's folder. */
  readonly dir: string
  /** Why it is not the folder asked for, when it is not. */
  readonly movedBecause?: string
}

/** Where clusters go whose folder asked for is out of the server user's reach. */
export const defaultFallback = "/var/lib/bothy"

/** `/root/app/.bothy/pg` -> `root-app-.bothy-pg-<hash>`: readable, and distinct per folder. */
const derivedName = (dir: string) => {
  const readable = dir
    .replace(/^\/+/, "")
    .replace(/[^A-Za-z0-9._-]+/g, "-")
    .slice(-80)
  return `${readable}-${createHash("sha256").update(dir).digest("hex").slice(0, 12)}`
}

const holdsCluster = (dir: string) => existsSync(join(dir, "PG_VERSION"))

export const place = (
  wanted: string,
  user: ServerUser,
  fallback: string = defaultFallback,
): Effect.Effect<Placed, EmbeddedDataUnreachable> =>
  Effect.gen(function* () {
    const dir = resolve(wanted)
    const attempt = <A>(f: () => A) =>
      Effect.try({ try: f, catch: (e) => new EmbeddedDataUnreachable({ dataDir: dir, detail: String(e) }) })
    if (user === undefined) return { dir }
    const moved = join(fallback, derivedName(dir))
    const movedBecause = `the OS user ${user.name} cannot enter ${dirname(dir)}`
    if (holdsCluster(moved)) return { dir: moved, movedBecause }
    const reachable = yield* attempt(() => {
      mkdirSync(dirname(dir), { recursive: true })
      return canEnter(user, dirname(dir))
    })
    if (reachable) return { dir }
    if (holdsCluster(dir)) {
      return yield* new EmbeddedDataUnreachable({
        dataDir: dir,
        detail: `${movedBecause}; move the cluster to ${moved}, run as another user, or set DATABASE_URL`,
      })
    }
    // bothy's own folder: the server's user must be able to enter it whatever the umask.
    yield* attempt(() => mkdirSync(fallback, { recursive: true }) !== undefined && chmodSync(fallback, 0o755))
    return { dir: moved, movedBecause }
  })

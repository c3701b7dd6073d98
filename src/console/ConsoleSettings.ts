/**
 * How the console looks and how long its sessions last, per host: `console.title`,
 * `console.logo_url`, `console.accent`, `console.frame_ancestors` and `console.session_seconds`.
 * Read when the admin server starts; a bad value stops it with the setting named.
 */
import { Effect, Result } from "effect"
import * as BothyConfig from "../platform/BothyConfig.ts"

export interface ConsoleSettings {
  readonly title: string
  /** An `https:` URL (or a path on this server); empty for none. */
  readonly logoUrl: string
  /** A `#rrggbb` colour for the header and buttons. */
  readonly accent: string
  /** The CSP `frame-ancestors` sources allowed to embed the portal, or `'none'`. */
  readonly frameAncestors: string
  readonly sessionSeconds: number
}

export const defaults: ConsoleSettings = {
  title: "bothy",
  logoUrl: "",
  accent: "#1f5fa8",
  frameAncestors: "'none'",
  sessionSeconds: 8 * 3600,
}

const title = (raw: string) =>
  raw.length > 0 && raw.length <= 80 && !/\p{Cc}/u.test(raw)
    ? Result.succeed(raw)
    : Result.fail("expected 1 to 80 characters of text")

const logoUrl = (raw: string) =>
  raw === "" || /^(https:\/\/[^\s"'<>]+|\/[^\s"'<>]*)$/.test(raw)
    ? Result.succeed(raw)
    : Result.fail("expected an https: URL or a path on this server")

const accent = (raw: string) =>
  /^#[0-9a-fA-F]{6}$/.test(raw) ? Result.succeed(raw.toLowerCase()) : Result.fail("expected a colour as #rrggbb")

// Sources are origins (scheme://host[:port]) or 'self'/'none': nothing that could end the header.
const frameAncestors = (raw: string) => {
  const sources = raw.trim().split(/\s+/)
  return sources.every((s) => s === "'none'" || s === "'self'" || /^https?:\/\/[A-Za-z0-9.*-]+(:\d+)?$/.test(s)) &&
    !(sources.includes("'none'") && sources.length > 1)
    ? Result.succeed(sources.join(" "))
    : Result.fail("expected 'none', 'self' or origins such as https://app.example.com, separated by spaces")
}

export const loadTitle = BothyConfig.setting("console.title", defaults.title, title)
export const loadLogoUrl = BothyConfig.setting("console.logo_url", defaults.logoUrl, logoUrl)
export const loadAccent = BothyConfig.setting("console.accent", defaults.accent, accent)
export const loadFrameAncestors = BothyConfig.setting(
  "console.frame_ancestors",
  defaults.frameAncestors,
  frameAncestors,
)
export const loadSessionSeconds = BothyConfig.setting(
  "console.session_seconds",
  String(defaults.sessionSeconds),
  BothyConfig.parseCount(60, 7 * 24 * 3600),
)

/** The settings from the environment. */
export const load = Effect.all({
  title: loadTitle,
  logoUrl: loadLogoUrl,
  accent: loadAccent,
  frameAncestors: loadFrameAncestors,
  sessionSeconds: loadSessionSeconds,
})

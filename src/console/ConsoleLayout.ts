/**
 * The page every console view sits in: the header with the host's title and logo, the navigation
 * the viewer may use (the operator's console, or a principal's portal), and the headers that keep a
 * page inert to what it shows: a `Content-Security-Policy` that runs only the console's own script
 * files (no inline script, no inline style, nothing from elsewhere), `nosniff`, and who may frame
 * it (`console.frame_ancestors`).
 */
import { HttpServerResponse } from "effect/http"
import type { Caller } from "../admin/AdminAuth.ts"
import { type Html, html } from "../admin/Html.ts"
import type { ConsoleSettings } from "./ConsoleSettings.ts"

/** Who is looking, with what they need to act. */
export interface Viewer {
  readonly caller: Caller
  readonly csrf: string
  readonly settings: ConsoleSettings
}

export const isOperator = (viewer: Viewer) => viewer.caller._tag === "Operator"

const operatorNav = [
  ["/console", "Overview"],
  ["/console/subscriptions", "Subscriptions"],
  ["/console/push", "Push"],
  ["/console/jobs", "Jobs"],
  ["/console/event-types", "Event types"],
] as const

const portalNav = [
  ["/console/subscriptions", "Subscriptions"],
  ["/console/event-types", "Event types"],
] as const

const logoSource = (logoUrl: string) => (logoUrl.startsWith("https:") ? new URL(logoUrl).origin : "")

export const securityHeaders = (settings: ConsoleSettings) => ({
  "content-security-policy": [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src 'self' data: ${logoSource(settings.logoUrl)}`.trim(),
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    `frame-ancestors ${settings.frameAncestors}`,
  ].join("; "),
  "x-content-type-options": "nosniff",
  "referrer-policy": "same-origin",
  "cache-control": "no-store",
})

/** A whole page: `current` is the navigation entry to mark. */
export const page = (viewer: Viewer, title: string, current: string, body: Html) => {
  const nav = isOperator(viewer) ? operatorNav : portalNav
  const { settings } = viewer
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="bothy-csrf" content="${viewer.csrf}">
<title>${title} · ${settings.title}</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="/console/assets/uPlot.min.css"><link rel="stylesheet" href="/console/assets/console.css">
<link rel="stylesheet" href="/console/assets/brand.css">
<script src="/console/assets/uPlot.iife.min.js" defer></script><script src="/console/assets/console.js" defer></script>
</head><body>
<a class="skip" href="#main">Skip to content</a>
<header><span class="brand">${settings.logoUrl === "" ? "" : html`<img src="${settings.logoUrl}" alt="" height="28">`}${settings.title}</span>
<nav aria-label="Sections"><ul>${nav.map(
    ([href, label]) =>
      html`<li><a href="${href}"${href === current ? html` aria-current="page"` : ""}>${label}</a></li>`,
  )}</ul></nav>
<span class="who">${viewer.caller._tag === "Operator" ? "operator" : html`portal of ${viewer.caller.principal}`}</span></header>
<main id="main" tabindex="-1"><h1>${title}</h1>
<p class="flash" role="status" aria-live="polite" hidden></p>
${body}</main></body></html>`
}

export const respond = (viewer: Viewer, status: number, markup: Html) =>
  HttpServerResponse.text(markup.markup, {
    status,
    contentType: "text/html; charset=utf-8",
    headers: securityHeaders(viewer.settings),
  })

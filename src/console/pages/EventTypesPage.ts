/**
 * `/console/event-types`, for the operator and for a principal alike: the event-type catalog
 * (bothy's built-in operational types beside the host's), each type with its description, its
 * payload's JSON Schema and an example payload, pretty-printed. A receiver's owner reads here what
 * its endpoint will get. The catalog is the admin API's (`EventTypesHandlers` builds it the same way).
 */
import { Effect } from "effect"
import { html } from "../../admin/Html.ts"
import { EventTypeCatalog, type EventTypeEntry } from "../../log/EventTypeCatalog.ts"
import * as OperationalEvents from "../../webhooks/subscriptions/OperationalEvents.ts"
import { route } from "../ConsolePage.ts"

const pretty = (value: unknown) => JSON.stringify(value, null, 2)

const flags = (entry: EventTypeEntry) =>
  [
    entry.name.startsWith("bothy.") ? "built in" : null,
    entry.validated ? "payloads validated" : null,
    entry.deprecated ? "deprecated" : null,
  ].filter((f) => f !== null)

const article = (entry: EventTypeEntry) => html`<article class="event-type" data-type="${entry.name}">
<h2 class="mono">${entry.name}</h2>
${flags(entry).length === 0 ? "" : html`<p class="event-type-flags">${flags(entry).join(" · ")}</p>`}
<p>${entry.description === "" ? html`<span class="none">No description.</span>` : entry.description}</p>
<h3>Example payload</h3>
${entry.example === null ? html`<p class="none">No example.</p>` : html`<pre class="example">${pretty(entry.example)}</pre>`}
<details><summary>Payload schema</summary>
${entry.schema === null ? html`<p class="none">No schema: payloads of this type are not checked.</p>` : html`<pre class="schema">${pretty(entry.schema)}</pre>`}
</details></article>`

export const page = route("/console/event-types", () =>
  Effect.gen(function* () {
    const catalog = yield* EventTypeCatalog.makeWith({ builtIn: OperationalEvents.catalogEntries })
    const entries = yield* catalog.list
    return {
      title: "Event types",
      current: "/console/event-types",
      body: html`<p>${entries.length} types. Subscriptions name these types (or patterns of them); each event's <code>data</code> is a payload like the example.</p>
<nav aria-label="Event types" class="event-type-index"><ul>${entries.map((e) => html`<li><a class="mono" href="#type-${e.name}">${e.name}</a></li>`)}</ul></nav>
${entries.map((e) => html`<div id="type-${e.name}">${article(e)}</div>`)}`,
    }
  }),
)

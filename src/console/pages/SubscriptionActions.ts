/**
 * What a viewer can do to a subscription from its page: each a form that `console.js` sends to
 * the admin API with the session's CSRF token after a confirmation. The API decides whether the
 * viewer may (a principal only on its own), so the page offers the same to everyone who sees it.
 */
import { html } from "../../admin/Html.ts"
import type { Subscription } from "../../webhooks/subscriptions/WebhookSubscriptions.ts"

export const actions = (s: Subscription) => {
  const api = `/v1/subscriptions/${s.id}`
  return html`<section class="actions" aria-labelledby="actions-title"><h2 id="actions-title">Actions</h2>
<form class="inline" id="test-event" data-api="${api}/test-event" data-method="POST" data-label="Test event sent"
 data-confirm="Send a test event (bothy.subscription.test) to this endpoint? It goes like any event, under the next sequence number."><button type="submit">Send a test event</button></form>
<form class="inline" id="recover" data-api="${api}/recover" data-method="POST" data-label="Recover"
 data-confirm="Send again every failed delivery of this subscription since that time?">
<label>Failed since (UTC)<input type="datetime-local" name="since" data-type="datetime" step="1" required></label>
<button type="submit">Recover</button></form>
<form class="inline" id="enable" data-api="${api}/enable" data-method="POST" data-label="Enable"
 data-confirm="Enable this subscription? Without a seq it starts from the log's head.">
<label>From seq (optional)<input name="fromSeq" data-in="query" data-optional inputmode="numeric" pattern="[0-9]+"></label>
<button type="submit">Enable</button></form>
<form class="inline" id="disable" data-api="${api}/disable" data-method="POST" data-label="Disable"
 data-confirm="Disable this subscription? Its pending deliveries end dead."><button type="submit" class="danger">Disable</button></form>
<form class="inline" id="retry" data-api="${api}/retry" data-method="POST" data-label="Retry now"
 data-confirm="Send its pending deliveries now instead of after the retry delay?"><button type="submit">Retry now</button></form>
<form class="inline" id="rotate" data-api="${api}/rotate-secret" data-method="POST" data-label="New secret (shown once)"
 data-show="secret" data-confirm="Rotate the signing secret? The old one keeps signing for its overlap."><button type="submit">Rotate secret</button></form>
<form class="inline" id="delete" data-api="${api}" data-method="DELETE" data-label="Delete" data-then="/console/subscriptions"
 data-confirm="Delete this subscription and its delivery history? This cannot be undone."><button type="submit" class="danger">Delete</button></form>
</section>`
}

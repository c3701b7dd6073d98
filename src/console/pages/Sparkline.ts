/**
 * A subscription's last 24 hours as a small inline SVG drawn on the server: attempts answered
 * 2xx and the others, hour by hour, as two lines (oldest hour left). No script draws it, and it
 * carries its figures in its `<title>` for a screen reader.
 */
import { html } from "../../admin/Html.ts"
import type { Hour } from "../data/SubscriptionHealthList.ts"

const hours = 24
const width = 120
const height = 28
const step = width / (hours - 1)

/** Per hour, oldest first: delivered and failed counts (0 where nothing was attempted). */
export const series = (rows: ReadonlyArray<Hour>) => {
  const delivered = Array.from({ length: hours }, () => 0)
  const failed = Array.from({ length: hours }, () => 0)
  for (const row of rows) {
    const at = hours - 1 - Math.min(hours - 1, Math.max(0, row.hoursAgo))
    delivered[at] = row.delivered
    failed[at] = row.failed
  }
  return { delivered, failed }
}

const points = (values: ReadonlyArray<number>, max: number) =>
  values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`).join(" ")

export const svg = (rows: ReadonlyArray<Hour>) => {
  const { delivered, failed } = series(rows)
  const max = Math.max(1, ...delivered, ...failed)
  const sum = (values: ReadonlyArray<number>) => values.reduce((a, b) => a + b, 0)
  const title = `Last 24 hours: ${sum(delivered)} attempts delivered, ${sum(failed)} failed (hourly)`
  return html`<svg class="spark" role="img" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"
 data-delivered="${delivered.join(",")}" data-failed="${failed.join(",")}"><title>${title}</title>
<polyline class="spark-delivered" fill="none" points="${points(delivered, max)}"/>
<polyline class="spark-failed" fill="none" points="${points(failed, max)}"/></svg>`
}

/**
 * A chart as the console's script draws it (`assets/console.js`): a `figure[data-chart]` holding
 * its figures as JSON, which uPlot draws and `window.bothyCharts[name]` exposes, with a caption
 * and a text fallback saying what it shows (read by screen readers, and shown with no script).
 */
import { type Html, html, jsonData } from "../admin/Html.ts"

export interface ChartSpec {
  readonly series: ReadonlyArray<string>
  readonly unit: string
  /** x (Unix seconds) first, then one row of y per series; null is a gap. */
  readonly data: ReadonlyArray<ReadonlyArray<number | null>>
  /** Draw each value as a dot too: for series with gaps, where a lone value makes no line. */
  readonly points?: boolean
}

/** `summary` is the figure's text alternative (totals, last values). */
export const figure = (name: string, caption: string, spec: ChartSpec, summary: Html | string) =>
  html`<figure data-chart="${name}" id="chart-${name}"><figcaption>${caption}</figcaption>
<p class="chart-summary">${summary}</p>${jsonData(spec)}</figure>`

/** A figure with nothing to draw, and why. */
export const absent = (name: string, caption: string, why: string) =>
  html`<figure id="chart-${name}"><figcaption>${caption}</figcaption><p class="none">${why}</p></figure>`

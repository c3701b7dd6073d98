// The console's only script (served from /console/assets, so the page's CSP can forbid inline
// script). It does two things: actions, which call the admin API with the session's CSRF token,
// and charts, which uPlot draws from data the page carries as JSON.
;(() => {
  const csrf = document.querySelector('meta[name="bothy-csrf"]')?.getAttribute("content") ?? ""
  const flash = (text, bad) => {
    const el = document.querySelector(".flash")
    if (!el) return
    el.textContent = text
    el.classList.toggle("bad", bad)
    el.hidden = false
    el.focus?.()
  }

  // <form data-api="/v1/..." data-method="POST" data-confirm="..."> with inputs: a field whose
  // data-in is "query" goes to the query string, "path" replaces {name} in the URL, the others
  // into a JSON body (data-type "number" as a number, "datetime" as an ISO time). On success the
  // page reloads (or goes to data-then), keeping the message.

  // A `datetime-local` value is read as UTC (the pages show UTC), and sent as ISO 8601.
  const utc = (value) => new Date(/(Z|[+-]\d\d:?\d\d)$/.test(value) ? value : `${value}Z`).toISOString()

  const submit = async (form) => {
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return
    let url = form.dataset.api
    const query = new URLSearchParams()
    const body = {}
    for (const input of form.querySelectorAll("[name]")) {
      if (input.value === "" && input.dataset.optional !== undefined) continue
      const value =
        input.dataset.type === "number"
          ? Number(input.value)
          : input.dataset.type === "datetime"
            ? utc(input.value)
            : input.value
      if (input.dataset.in === "query") query.set(input.name, input.value)
      else if (input.dataset.in === "path") url = url.replace(`{${input.name}}`, encodeURIComponent(input.value))
      else body[input.name] = value
    }
    const q = query.toString()
    const hasBody = Object.keys(body).length > 0
    const response = await fetch(q === "" ? url : `${url}?${q}`, {
      method: form.dataset.method ?? "POST",
      credentials: "same-origin",
      headers: { "x-bothy-csrf": csrf, ...(hasBody ? { "content-type": "application/json" } : {}) },
      body: hasBody ? JSON.stringify(body) : undefined,
    })
    const text = await response.text()
    let json
    try {
      json = text === "" ? {} : JSON.parse(text)
    } catch {
      json = { message: text }
    }
    if (!response.ok) return flash(`${form.dataset.label ?? "Action"} failed: ${json.message ?? response.status}`, true)
    if (form.dataset.show) {
      return flash(`${form.dataset.label ?? "Done"}: ${json[form.dataset.show] ?? ""}`, false)
    }
    sessionStorage.setItem("bothy-flash", `${form.dataset.label ?? "Done"}: done`)
    window.location.assign(form.dataset.then ?? window.location.href)
  }

  document.addEventListener("submit", (event) => {
    const form = event.target
    if (!(form instanceof HTMLFormElement) || !form.dataset.api) return
    event.preventDefault()
    submit(form).catch((e) => flash(`Action failed: ${e.message}`, true))
  })

  const kept = sessionStorage.getItem("bothy-flash")
  if (kept !== null) {
    sessionStorage.removeItem("bothy-flash")
    flash(kept, false)
  }

  // <figure data-chart="name"><script type="application/json">{ "series": [...], "data": [[x...], [y...]] }</script>
  // The drawn charts are kept in window.bothyCharts by name, with the figures they hold.
  window.bothyCharts = {}
  const palette = ["#1f5fa8", "#1b7a3d", "#b3261e", "#9a6700", "#6b3fa0"]
  for (const figure of document.querySelectorAll("figure[data-chart]")) {
    const source = figure.querySelector('script[type="application/json"]')
    if (!source || typeof uPlot === "undefined") continue
    const spec = JSON.parse(source.textContent)
    const width = Math.max(280, Math.min(figure.clientWidth || 560, 720))
    // spec.points: draw each value as a dot too (a series with gaps, where a lone value has no line)
    const points = spec.points === true ? { points: { show: true, size: 6 } } : {}
    const series = [
      {},
      ...spec.series.map((label, i) => ({ label, stroke: palette[i % palette.length], width: 2, ...points })),
    ]
    const chart = new uPlot(
      { width, height: 180, series, axes: [{}, { label: spec.unit ?? "" }], legend: { live: false } },
      spec.data,
      figure,
    )
    window.bothyCharts[figure.dataset.chart] = { series: spec.series, data: spec.data, chart }
  }
})()

/**
 * Reads the Prometheus text format as the tests need it: each sample's name, labels and value,
 * and each family's HELP and TYPE. Enough for what bothy's exporter writes (no escapes inside
 * label values beyond `\"`, `\\` and `\n`), not a general parser.
 */
export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

export interface Exposition {
  readonly samples: ReadonlyArray<Sample>
  readonly help: ReadonlyMap<string, string>
  readonly type: ReadonlyMap<string, string>
}

const labelPattern = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

export const parse = (text: string): Exposition => {
  const samples: Array<Sample> = []
  const help = new Map<string, string>()
  const type = new Map<string, string>()
  for (const line of text.split("\n")) {
    const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line)
    if (meta !== null) {
      ;(meta[1] === "HELP" ? help : type).set(meta[2]!, meta[3]!)
      continue
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (sample === null) continue
    const labels: Record<string, string> = {}
    for (const [, key, value] of (sample[2] ?? "").matchAll(labelPattern)) labels[key!] = value!
    samples.push({ name: sample[1]!, labels, value: Number(sample[3]) })
  }
  return { samples, help, type }
}

/** The family a sample belongs to: a histogram's `_bucket`, `_sum` and `_count` are its own name's. */
export const family = (exposition: Exposition, sample: Sample) => {
  const base = sample.name.replace(/_(bucket|sum|count)$/, "")
  return exposition.type.get(base) === "histogram" ? base : sample.name
}

/** The value of the one sample named `name` whose labels include `labels`, if any. */
export const value = (exposition: Exposition, name: string, labels: Record<string, string> = {}) =>
  exposition.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value

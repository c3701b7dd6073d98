/**
 * The TypeScript blocks of a Markdown document, each with the line it starts on, so that what a
 * compiler says about a block can be reported at its place in the document.
 *
 * A block is a fence that opens with "```ts" (or "```typescript") at the start of a line. Words
 * after the language are markers: `fragment` (a piece that cannot stand alone; not compiled) and
 * `run` (also run as a program). Any other word is refused rather than ignored, so that a misspelt
 * marker cannot quietly turn a block into something nobody checks.
 */

export type Marker = "fragment" | "run"

const markers: ReadonlyArray<string> = ["fragment", "run"] satisfies ReadonlyArray<Marker>

export interface CodeBlock {
  /** 1-based line of the opening fence. */
  readonly fence: number
  readonly markers: ReadonlyArray<Marker>
  readonly code: string
}

export interface Extracted {
  readonly blocks: ReadonlyArray<CodeBlock>
  /** Fences that could not be taken as they stand, e.g. `README.md:12: unknown marker "fragmnet"`. */
  readonly problems: ReadonlyArray<string>
}

const opening = /^```\s*(\S*)\s*(.*)$/
const closing = /^```\s*$/

export const extract = (document: string, markdown: string): Extracted => {
  const lines = markdown.split("\n")
  const blocks: Array<CodeBlock> = []
  const problems: Array<string> = []
  let open: { fence: number; typescript: boolean; words: ReadonlyArray<string>; lines: Array<string> } | undefined
  lines.forEach((line, index) => {
    if (open === undefined) {
      const match = opening.exec(line)
      if (match === null) return
      const words = match[2]!.split(/\s+/).filter((w) => w.length > 0)
      open = { fence: index + 1, typescript: /^(ts|typescript)$/i.test(match[1]!), words, lines: [] }
      return
    }
    if (!closing.test(line)) {
      open.lines.push(line)
      return
    }
    if (open.typescript) {
      const unknown = open.words.filter((w) => !markers.includes(w))
      if (unknown.length > 0) {
        problems.push(
          `${document}:${open.fence}: unknown marker ${unknown.map((w) => JSON.stringify(w)).join(", ")} (known: ${markers.join(", ")})`,
        )
      } else {
        blocks.push({
          fence: open.fence,
          markers: open.words as ReadonlyArray<Marker>,
          code: `${open.lines.join("\n")}\n`,
        })
      }
    }
    open = undefined
  })
  if (open !== undefined) problems.push(`${document}:${open.fence}: code block never closed`)
  return { blocks, problems }
}

/** The module name a block is written to, and read back from in compiler messages. */
export const fileName = (block: CodeBlock) => `L${block.fence}.ts`

// tsc names files relative to its working folder: match the file name alone.
const diagnostic = /^(?:.*[/\\])?L(\d+)\.ts\((\d+),(\d+)\): (.*)$/

/**
 * `tsc --pretty false` output with each message moved to its place in the document: a block's line
 * 1 is the line after its fence. Continuation lines (indented) stay with their message.
 */
export const locate = (document: string, tscOutput: string): ReadonlyArray<string> => {
  const messages: Array<string> = []
  for (const line of tscOutput.split("\n")) {
    if (line.trim().length === 0) continue
    const match = diagnostic.exec(line)
    if (match !== null) {
      const fence = Number(match[1])
      messages.push(`${document}:${fence + Number(match[2])}:${match[3]} (block at line ${fence}): ${match[4]}`)
    } else if (/^\s/.test(line) && messages.length > 0) {
      messages[messages.length - 1] += `\n${line}`
    } else {
      messages.push(line)
    }
  }
  return messages
}

/**
 * The README as a script (test/e2e/readme.test.ts runs it; the rule is also in an HTML comment at
 * the top of README.md): its fenced ```sh blocks, in order, each cut into command lines, each line
 * with the claims its `# … → A, B` comment makes about its output.
 *
 * A marker comment on the line right above a block says how it runs:
 *   <!-- readme-test: skip (why) -->   not run (npm install, npm test, AWS-only commands)
 *   <!-- readme-test: restart -->      the block is an `npm start` line: the test stops its stack as
 *                                      Ctrl-C would and runs that line on the same data dir and port
 * Every other sh block runs. A marker the parser does not know fails the parse, so a typo cannot
 * silently turn a block off.
 */

export type BlockKind = 'run' | 'skip' | 'restart';

export interface ReadmeLine {
  /** 1-based line of the README where the command starts. */
  lineNo: number;
  /** The `## ` section it is in. */
  section: string;
  /** The command as the README shows it: continuation lines joined by their newlines, comment kept. */
  command: string;
  /** What its comment says the output shows (after `→`, separated by ", "); empty if it says nothing. */
  claims: string[];
}

export interface ReadmeBlock {
  kind: BlockKind;
  lineNo: number;
  section: string;
  lines: ReadmeLine[];
}

export class ReadmeFormatError extends Error {
  override name = 'ReadmeFormatError';
}

const MARKER = /^<!--\s*readme-test:\s*(\S+?)(?:\s.*)?-->\s*$/;
const CLAIM_ARROW = '→';

/**
 * Commands the README test must never run from a block, whatever its markers say: they would
 * install into the shared checkout, recurse into `npm test`, start a second stack beside the
 * test's own, or reach AWS. A block holding one must be marked skip (or restart, for npm start).
 */
const NEVER_RUN = /\bnpm\s+(install|ci|test|start)\b|\bnpx\s+cdk\b|\bcdk\s+(deploy|destroy|bootstrap)\b/;

export interface BlockOptions {
  /**
   * Whether a block that is not marked skip may hold a NEVER_RUN command (default: no, it fails
   * the parse). docs/aws.md's test (test/e2e/aws-docs.test.ts) lists such lines itself.
   */
  allowNeverRun?: boolean;
}

export function readmeBlocks(text: string, options: BlockOptions = {}): ReadmeBlock[] {
  const lines = text.split('\n');
  const blocks: ReadmeBlock[] = [];
  let section = '';
  let previous = '';
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    // A fence may be indented (a block inside a list item): its body loses the fence's indentation.
    if (line.trimStart().startsWith('```')) {
      const indent = line.length - line.trimStart().length;
      let end = i + 1;
      while (end < lines.length && lines[end]!.trim() !== '```') end++;
      if (end >= lines.length) throw new ReadmeFormatError(`README line ${i + 1}: a code block that never ends`);
      const body = lines.slice(i + 1, end).map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length)));
      if (line.trim() === '```sh') blocks.push(block(body, i + 2, section, kindOf(previous, i + 1), options));
      i = end;
      previous = '```';
      continue;
    }
    if (line.startsWith('## ')) section = line.slice(3).trim();
    if (line.trim()) previous = line.trim();
  }
  return blocks;
}

function kindOf(lineAbove: string, lineNo: number): BlockKind {
  const m = MARKER.exec(lineAbove);
  if (!m) {
    if (lineAbove.includes('readme-test')) throw new ReadmeFormatError(`README line ${lineNo - 1}: a readme-test marker must be one whole line: <!-- readme-test: skip (why) --> or <!-- readme-test: restart -->`);
    return 'run';
  }
  if (m[1] === 'skip' || m[1] === 'restart') return m[1];
  throw new ReadmeFormatError(`README line ${lineNo - 1}: unknown readme-test marker "${m[1]}" (skip or restart)`);
}

/** `<<WORD`, `<<'WORD'`, `<<"WORD"`, `<<-WORD`: the word that ends a here-document. */
const HEREDOC = /<<-?\s*(['"]?)([A-Za-z_][A-Za-z0-9_]*)\1/;

function block(body: string[], firstLineNo: number, section: string, kind: BlockKind, options: BlockOptions): ReadmeBlock {
  const out: ReadmeLine[] = [];
  for (let i = 0; i < body.length; i++) {
    const start = i;
    // A trailing backslash continues the command on the next line, as in the shell; a
    // here-document runs to the line holding only its word.
    while (body[i]!.endsWith('\\') && i + 1 < body.length) i++;
    const heredoc = body[i]!.trimStart().startsWith('#') ? null : HEREDOC.exec(body[i]!);
    if (heredoc) {
      const end = body.findIndex((l, at) => at > i && l.trim() === heredoc[2]);
      if (end < 0) throw new ReadmeFormatError(`README line ${firstLineNo + i}: a here-document that never ends (${heredoc[2]})`);
      i = end;
    }
    const command = body.slice(start, i + 1).join('\n');
    const trimmed = command.trim();
    if (!trimmed || trimmed.startsWith('#')) continue;
    const lineNo = firstLineNo + start;
    if (kind === 'run' && !options.allowNeverRun && NEVER_RUN.test(trimmed)) {
      throw new ReadmeFormatError(`README line ${lineNo} (${section}): "${trimmed.split('\n')[0]}" is never run by the README test: mark its block <!-- readme-test: skip (why) --> (or restart, for npm start)`);
    }
    out.push({ lineNo, section, command, claims: claimsOf(command, lineNo) });
  }
  if (kind === 'restart' && (out.length !== 1 || !/\bnpm\s+start\s*$/.test(out[0]!.command.replace(/\s+#.*$/, '')))) {
    throw new ReadmeFormatError(`README line ${firstLineNo - 1}: a restart block holds exactly one line, [VAR=value ...] npm start`);
  }
  return { kind, lineNo: firstLineNo, section, lines: out };
}

/** The claims of a command's last line: what follows `→`, which must be inside its `#` comment. */
export function claimsOf(command: string, lineNo = 0): string[] {
  const last = command.split('\n').at(-1)!;
  const arrow = last.lastIndexOf(CLAIM_ARROW);
  if (arrow < 0) return [];
  if (!/(^|\s)#/.test(last.slice(0, arrow))) throw new ReadmeFormatError(`README line ${lineNo}: "${CLAIM_ARROW}" outside a # comment`);
  const claims = last.slice(arrow + CLAIM_ARROW.length).split(', ').map((c) => c.trim()).filter(Boolean);
  if (!claims.length) throw new ReadmeFormatError(`README line ${lineNo}: "${CLAIM_ARROW}" with no claim after it`);
  return claims;
}

/** The tables a client printed (prettytable): `| Property | Value |` (`| Field | Value |`) tables, list tables, and loose `| a | b |` rows (a grep's). */
interface Tables {
  properties: Map<string, string[]>;
  rows: Record<string, string>[];
}

const BORDER = /^\+[-+]+\+$/;
const cellsOf = (row: string) => row.slice(1, -1).split('|').map((c) => c.trim());

export function tablesIn(output: string): Tables {
  const properties = new Map<string, string[]>();
  const rows: Record<string, string>[] = [];
  const addProperty = (k: string, v: string) => properties.set(k, [...(properties.get(k) ?? []), v]);
  // prettytable prints border, header, border, rows, border; a border right after the last
  // border starts the next table.
  let state: 'none' | 'header' | 'separator' | 'body' | 'ended' = 'none';
  let header: string[] = [];
  for (const raw of output.split('\n')) {
    const line = raw.trim();
    if (BORDER.test(line)) {
      state = state === 'none' || state === 'ended' ? 'header' : state === 'separator' ? 'body' : 'ended';
      continue;
    }
    const isRow = line.length > 1 && line.startsWith('|') && line.endsWith('|');
    if (!isRow) {
      state = 'none';
      continue;
    }
    const cells = cellsOf(line);
    if (state === 'header') {
      header = cells;
      state = 'separator';
    } else if (state === 'body') {
      // novaclient, cinderclient and manilaclient head a record `Property | Value`, openstackclient `Field | Value`.
      if (header.length === 2 && (header[0] === 'Property' || header[0] === 'Field') && header[1] === 'Value') addProperty(cells[0]!, cells[1]!);
      else rows.push(Object.fromEntries(header.map((h, i) => [h, cells[i] ?? ''])));
    } else if (cells.length === 2) {
      addProperty(cells[0]!, cells[1]!);
    }
  }
  return { properties, rows };
}

/**
 * The claims the output does not show. `Field=value`: a `| Field | value |` row, or a list
 * table's column Field with that value in some row. Anything else: the text itself, verbatim.
 */
export function unmetClaims(output: string, claims: readonly string[]): string[] {
  const tables = tablesIn(output);
  return claims.filter((claim) => {
    const eq = claim.indexOf('=');
    if (eq <= 0) return !output.includes(claim);
    const field = claim.slice(0, eq).trim();
    const value = claim.slice(eq + 1).trim();
    const asProperty = tables.properties.get(field)?.includes(value) ?? false;
    const inList = tables.rows.some((r) => r[field] === value);
    return !(asProperty || inList);
  });
}

/** The README's local URL, which the test points at its own stack. */
export const README_URL = 'http://127.0.0.1:8780';

/**
 * The README is true: its walkthroughs run, line by line, against a fresh `npm start`, and each
 * line does what the README says it does.
 *
 * The rule (also in an HTML comment at the top of README.md):
 *   - Every fenced ```sh block of README.md runs, in the README's order, one command line at a time,
 *     in one bash (what a line sets holds for the next, as in the user's terminal) started in the
 *     repository's root with only PATH, HOME, LANG and the stack's FERRY_DATA_DIR and FERRY_PORT
 *     set; the README's own exports do the rest. A line continued with `\` is one command line.
 *   - The stack is a fresh `npm start` (a new data directory, a free port) at the user's pace
 *     (FERRY_LOCAL_WAIT_SCALE=1, not the tier's 1/100: test/support/npm-start.ts says why); every
 *     http://127.0.0.1:8780 in a line is replaced by that stack's URL.
 *   - A marker comment on the line right above a block changes how it runs:
 *     `<!-- readme-test: skip (why) -->`: not run (npm install, npm test, AWS-only commands);
 *     `<!-- readme-test: restart -->`: a one-line block `[VAR=value ...] npm start`: the stack is
 *     stopped as Ctrl-C stops it and that line is run on the same data directory and port.
 *     A block that would run npm install/ci/test/start or cdk unmarked fails the test at once.
 *   - A line fails the test when it exits non-zero, when it does not end within LINE_TIMEOUT_MS,
 *     or when its output does not show a claim of its comment: `# … → A, B` claims A and B.
 *     `Field=value` needs a table row `| Field | value |` or a list table whose column Field has
 *     that value in some row; any other claim must appear in the output verbatim.
 *   - The bash runs with pipefail, so a failing client inside `$(client … | awk …)` fails its line.
 * The test stops at the first failing line and names it (README line, section, command, reason,
 * output). FERRY_README=<file> runs another version of the README (e.g. `git show HEAD~1:README.md`).
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { npmStart, type NpmStartStack } from '../support/npm-start.js';
import { README_URL, readmeBlocks, unmetClaims, type ReadmeBlock, type ReadmeLine } from '../support/readme.js';
import { startShell, type ShellSession } from '../support/shell-session.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const README = process.env.FERRY_README ? resolve(process.env.FERRY_README) : join(ROOT, 'README.md');
/** One line: the longest is a cross-cell resize with --poll (novaclient polls every 5 s) or a wait_for. */
const LINE_TIMEOUT_MS = 90_000;
/** How much of a failing line's output the failure shows. */
const OUTPUT_TAIL_LINES = 40;

let dataDir: string;
let stack: NpmStartStack | undefined;
let shell: ShellSession | undefined;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'ferry-readme-'));
}, 10_000);

afterAll(async () => {
  try {
    await shell?.close();
    await stack?.stop();
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}, 60_000);

class ReadmeLineFailed extends Error {
  override name = 'ReadmeLineFailed';
  constructor(line: ReadmeLine, why: string, output: string) {
    const tail = output.trimEnd().split('\n').slice(-OUTPUT_TAIL_LINES).join('\n');
    super(`README.md line ${line.lineNo} (${line.section}):\n  ${line.command.split('\n').join('\n  ')}\n${why}\n--- its output (last ${OUTPUT_TAIL_LINES} lines) ---\n${tail}`);
  }
}

const local = (command: string) => command.replaceAll(README_URL, stack!.url);

async function runBlock(block: ReadmeBlock, timings: { line: ReadmeLine; ms: number }[]): Promise<void> {
  for (const line of block.lines) {
    const result = await shell!.run(local(line.command), LINE_TIMEOUT_MS).catch((e: unknown) => {
      throw new ReadmeLineFailed(line, (e as Error).message, '');
    });
    timings.push({ line, ms: result.ms });
    if (result.code !== 0) throw new ReadmeLineFailed(line, `exited ${result.code}`, result.output);
    const unmet = unmetClaims(result.output, line.claims);
    if (unmet.length) throw new ReadmeLineFailed(line, `its comment claims ${unmet.map((c) => `"${c}"`).join(', ')}, which the output does not show`, result.output);
  }
}

test('every command line of the README does what the README says, in order, against a fresh npm start', async () => {
  const blocks = readmeBlocks(readFileSync(README, 'utf8'));
  expect(blocks.filter((b) => b.kind === 'run').length, 'the README has sh blocks to run').toBeGreaterThan(0);

  const started = Date.now();
  stack = await npmStart({ cwd: ROOT, dataDir });
  const startMs = Date.now() - started;
  shell = await startShell({
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8', FERRY_DATA_DIR: dataDir, FERRY_PORT: String(stack.port) },
  });

  const timings: { line: ReadmeLine; ms: number }[] = [];
  for (const block of blocks) {
    if (block.kind === 'skip') continue;
    if (block.kind === 'restart') {
      const line = block.lines[0]!;
      const at = Date.now();
      await stack.restart(line.command).catch((e: unknown) => {
        throw new ReadmeLineFailed(line, (e as Error).message, stack!.log());
      });
      timings.push({ line, ms: Date.now() - at });
      continue;
    }
    await runBlock(block, timings);
  }

  // What took the time, for whoever makes it faster (the README's waits or the stack's).
  const slowest = [...timings].sort((a, b) => b.ms - a.ms).slice(0, 5);
  console.log(
    `README: ${timings.length} lines in ${((Date.now() - started) / 1000).toFixed(1)} s (npm start ${(startMs / 1000).toFixed(1)} s); slowest: ` +
      slowest.map((t) => `line ${t.line.lineNo} ${(t.ms / 1000).toFixed(1)} s`).join(', '),
  );
  expect(timings.length).toBe(blocks.reduce((n, b) => n + (b.kind === 'skip' ? 0 : b.lines.length), 0));
}, 600_000);

/**
 * Start and stop as a user does it (issue 16): `npm start` as a child process in a process group of
 * its own, on a fresh FERRY_DATA_DIR and a free FERRY_PORT. Each of SIGTERM, SIGINT and kill -9
 * sent to the npm process (npm itself, not its group), Ctrl-C (SIGINT to the group) and kill -9 of
 * the stack's node process leaves no process of that stack within 5 s: no npm, no node, no esbuild,
 * no DynamoDB Local (java). They are found in /proc by the data directory, in a process's command
 * line (java's `-dbPath`) or its environment (FERRY_DATA_DIR, which every process of the stack
 * inherits). Each next start on the same directory comes up, and every start prints a line per
 * stage and no Node or AWS SDK warning. The reconcile's line comes after "ferry ready" (its pass
 * runs while requests are served); the first two rounds signal as soon as the stack is ready, with
 * the pass most likely still running, and the stop must say no error of it either.
 *
 * DynamoDB Local's class archive (dynamo-cds.ts) starts absent here (a cache directory of the
 * test's own): the first start has one written beside it and is stopped right after "ferry ready",
 * and the second maps it, unless the machine was too busy for the write to end within its
 * deadline after the stop, which that start's line must then say. No partial archive or writer's
 * claim is left once every process is gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, test } from 'vitest';
import { REPO_ROOT } from '../../infra/local/http.js';
import { freePort } from '../../infra/local/ports.js';

/** The promise: everything of the stack gone this long after the signal. */
const GONE_WITHIN_MS = 5000;
/** The stages start.mjs, main.ts and stack.ts print before "ferry ready", in no particular order (some run side by side). */
const STAGES = ['system', 'bundle', 'lock', 'modules', 'DynamoDB Local', 'tables', 'S3', 'state machines', 'inventory', 'HTTP', 'identity'];
/** The start's reconcile pass, which ends after "ferry ready": its stage line. */
const RECONCILE_LINE = /^ferry: reconcile +\d+ ms +\(at \d+\.\d\d s\) /;

const started: ChildProcess[] = [];
let dataDir: string | undefined;
let archiveDir: string | undefined;

interface NpmStart {
  npm: ChildProcess;
  /** Resolves with stdout's lines up to "ferry ready"; rejects if npm exits first. */
  ready: Promise<string[]>;
  /** Resolves with stdout's lines up to the reconcile's stage line (the start's pass ended); rejects if npm exits first. */
  reconciled: Promise<string[]>;
  output: () => string;
}

/** The environment of a user's shell: none of this process's endpoints, faults, table prefix or SDK switches. */
function userEnv(dir: string, port: number): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, FERRY_DATA_DIR: dir, FERRY_PORT: String(port), FERRY_DYNAMO_CDS_DIR: archiveDir };
  for (const k of Object.keys(env)) {
    if (/^(FERRY_(DYNAMODB|S3|SFN)_ENDPOINT|FERRY_FAULTS|FERRY_TABLE_|AWS_SDK_JS_)/.test(k)) delete env[k];
  }
  return env;
}

function npmStart(dir: string, port: number): NpmStart {
  const npm = spawn('npm', ['start'], { cwd: REPO_ROOT, env: userEnv(dir, port), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  started.push(npm);
  const out: string[] = [];
  const lines: string[] = [];
  npm.stderr!.on('data', (d) => out.push(String(d)));
  const waiters: { last: (line: string) => boolean; resolve: (lines: string[]) => void }[] = [];
  createInterface({ input: npm.stdout! }).on('line', (line) => {
    out.push(`${line}\n`);
    lines.push(line);
    for (const w of waiters) if (w.last(line)) w.resolve([...lines]);
  });
  const linesUpTo = (what: string, last: (line: string) => boolean) =>
    new Promise<string[]>((resolve, reject) => {
      waiters.push({ last, resolve });
      npm.once('exit', (code, signal) => reject(new Error(`npm start exited (${code ?? signal}) before ${what}:\n${out.join('')}`)));
    });
  const ready = linesUpTo('"ferry ready"', (line) => line.startsWith('ferry ready '));
  const reconciled = linesUpTo('the reconcile line', (line) => RECONCILE_LINE.test(line));
  ready.catch(() => undefined);
  reconciled.catch(() => undefined);
  return { npm, ready, reconciled, output: () => out.join('') };
}

/** Pids of the live processes that name `dir` in their command line or environment. */
function processesOf(dir: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      // A zombie (exited, not yet reaped) runs nothing and holds no port or file.
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (/^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2))) continue;
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      const environ = readFileSync(`/proc/${name}/environ`, 'utf8').split('\0');
      if (cmdline.some((a) => a === dir || a.startsWith(`${dir}/`)) || environ.includes(`FERRY_DATA_DIR=${dir}`)) pids.push(Number(name));
    } catch (e) {
      // Gone between the listing and the read, or another user's (the stack's processes are ours): not the stack's.
      if (['ENOENT', 'ESRCH', 'EACCES'].includes((e as NodeJS.ErrnoException).code ?? '')) continue;
      throw e;
    }
  }
  return pids;
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return '(gone)';
    throw e;
  }
}

/** Milliseconds until no process of `dir` remains; fails naming them after GONE_WITHIN_MS. */
async function goneWithin(dir: string): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    const left = processesOf(dir);
    if (left.length === 0) return Date.now() - t0;
    if (Date.now() - t0 > GONE_WITHIN_MS) {
      throw new Error(`${GONE_WITHIN_MS / 1000} s after the signal, still running:\n${left.map((p) => `  ${p} ${commandOf(p).slice(0, 200)}`).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

afterAll(async () => {
  if (!dataDir) return;
  for (const pid of processesOf(dataDir)) process.kill(pid, 'SIGKILL');
  await rm(dataDir, { recursive: true, force: true });
  if (archiveDir) await rm(archiveDir, { recursive: true, force: true });
});

/** What a start's DynamoDB Local line says of the class archive. */
const archiveNote = (lines: string[]) => lines.find((l) => l.startsWith('ferry: DynamoDB Local'))?.replace(/^.*?\(at [\d.]+ s\)\s*/, '') ?? '(no line)';

describe('npm start, and a signal to npm', () => {
  test('Ctrl-C, SIGTERM, SIGINT and kill -9 of npm, and kill -9 of node, each leave no process of the stack within 5 s; the next start on the directory works; starts print their stages quietly', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'ferry-start-stop-'));
    archiveDir = await mkdtemp(join(tmpdir(), 'ferry-start-stop-cds-'));
    const port = await freePort();

    const seen: string[] = [];
    // npm's: npm forwards the first two; kill -9 of npm leaves node to notice (parent-watch.ts).
    // node's kill -9: no code of ours runs, and DynamoDB Local must go all the same (dynamo-process.ts).
    // And Ctrl-C in a terminal: SIGINT to the whole foreground group.
    const rounds = [
      { signal: 'SIGINT', to: 'group' },
      { signal: 'SIGTERM', to: 'npm' },
      { signal: 'SIGINT', to: 'npm' },
      { signal: 'SIGKILL', to: 'npm' },
      { signal: 'SIGKILL', to: 'node' },
    ] as const;
    for (const { signal, to } of rounds) {
      // Prepare: a start as a user's (the first on a fresh directory, then on the one left by the signal before).
      const t0 = Date.now();
      const start = npmStart(dataDir, port);
      const lines = await start.ready;
      const readyMs = Date.now() - t0;
      const running = processesOf(dataDir).map(commandOf);
      expect(running.some((c) => c.includes('DynamoDBLocal.jar')), running.join('\n')).toBe(true);
      expect(running.some((c) => c.includes('infra/local/start.mjs')), running.join('\n')).toBe(true);
      for (const stage of STAGES) expect(lines, `the stage line of "${stage}"`).toContainEqual(expect.stringMatching(new RegExp(`^ferry: ${stage} +\\d+ ms +\\(at \\d+\\.\\d\\d s\\)`)));
      expect(start.output()).not.toMatch(/NodeVersionSupportWarning|\(node:\d+\) \w*Warning/);
      // The class archive: written beside the first start, stopped right after it is ready; mapped by the next.
      const archive = archiveNote(lines);
      if (seen.length === 0) expect(archive).toMatch(/^no class archive yet: a JVM beside it writes one/);
      if (seen.length === 1) expect(archive).toMatch(/^class archive mapped$|the last writer was cut short: its stack stopped/);
      const signalDuringReconcile = seen.length < 2;
      if (!signalDuringReconcile) {
        // The pass ends on its own after "ferry ready", with its line.
        const upToReconciled = await start.reconciled;
        expect(upToReconciled.length, 'the reconcile line comes after "ferry ready"').toBeGreaterThan(lines.length);
        expect(upToReconciled.at(-1)).toMatch(/repaired, \d+ left, \d+ finding\(s\) for an operator$/);
      }

      // Act: the signal to npm alone, to the stack's node process alone, or to npm's group.
      const node = processesOf(dataDir).find((p) => commandOf(p).includes('infra/local/start.mjs'))!;
      process.kill(to === 'npm' ? start.npm.pid! : to === 'group' ? -start.npm.pid! : node, signal);

      // Assess: nothing of the stack left within 5 s; a stop that met the pass said no error of it.
      const ms = await goneWithin(dataDir);
      expect(ms).toBeLessThanOrEqual(GONE_WITHIN_MS);
      if (signal !== 'SIGKILL') expect(start.output()).not.toMatch(/"level":"ERROR"|stop failed|did not finish|start was interrupted|resuming the previous executions failed/);
      seen.push(`ready ${(readyMs / 1000).toFixed(1)} s (${archive}), all gone ${(ms / 1000).toFixed(1)} s after ${signal} to ${to}`);
    }
    // For the record (the machine's load decides the start's time): what each round took.
    console.info(`npm start: ${seen.join('; ')}`);

    // After the kill -9s, a start on the same directory still comes up, and stops.
    const last = npmStart(dataDir, port);
    await last.ready;
    process.kill(last.npm.pid!, 'SIGTERM');
    await goneWithin(dataDir);
    // Whatever the writers came to: no half archive and no claim left behind them.
    const left = readdirSync(archiveDir, { recursive: true, encoding: 'utf8' }).filter((f) => /\.tmp$|(^|\/)writing$/.test(f));
    expect(left).toEqual([]);
  }, 300_000);
});

/**
 * Driving Debian's `tempest` (python3-tempest 33) in a workspace of its own: `tempest init` with a
 * workspace file in the workspace (nothing lands in ~/.tempest), the generated configuration,
 * `tempest run`, and the results read back from stestr's subunit stream (./results.py).
 */
import { spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { accountsYaml, tempestConf, type Account, type TempestInputs } from './config.js';

const here = dirname(fileURLToPath(import.meta.url));
export const EXCLUDE_FILE = join(here, 'exclude.txt');

/** The selection of issue 15, one regex per group (each a module prefix of Tempest's test ids). */
export const GROUPS: { name: string; prefix: string }[] = [
  { name: 'volume', prefix: 'tempest.api.volume.' },
  { name: 'compute.volumes', prefix: 'tempest.api.compute.volumes.' },
  { name: 'compute.admin.test_migrations', prefix: 'tempest.api.compute.admin.test_migrations.' },
  // As Tempest's own regex would: test_live_migration and test_live_migration_negative.
  { name: 'compute.admin.test_live_migration', prefix: 'tempest.api.compute.admin.test_live_migration' },
  { name: 'compute.servers.test_server_actions', prefix: 'tempest.api.compute.servers.test_server_actions.' },
  { name: 'identity', prefix: 'tempest.api.identity.' },
];

export const SELECTION = `^(${GROUPS.map((g) => g.prefix.replace(/\./g, '\\.')).join('|')})`;

export type Status = 'success' | 'fail' | 'skip' | 'xfail' | 'uxsuccess';
export interface TestResult {
  id: string;
  status: Status;
  reason: string;
}

export interface Run {
  code: number | null;
  output: string;
}

/** Runs a command; its output goes to `echo` as it comes (the runner's console) and is kept. */
export function run(cmd: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; echo?: (s: string) => void; input?: string }): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: options.cwd, env: { ...process.env, ...options.env } });
    let output = '';
    const take = (d: Buffer) => {
      output += d.toString();
      options.echo?.(d.toString());
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
    if (options.input !== undefined) child.stdin.end(options.input);
    else child.stdin.end();
  });
}

/** Tempest reads etc/tempest.conf of its working directory; the env pins it there all the same. */
const tempestEnv = (workspace: string) => ({ TEMPEST_CONFIG_DIR: join(workspace, 'etc'), TEMPEST_CONFIG: 'tempest.conf', PYTHONWARNINGS: 'ignore' });

/** `tempest init` into `workspace`, then the configuration (and accounts.yaml) written there. */
export async function initWorkspace(inputs: TempestInputs, accounts: Account[]): Promise<void> {
  const ws = inputs.workspace;
  await mkdir(ws, { recursive: true });
  const init = await run('tempest', ['init', '--workspace-path', join(ws, 'workspace.yaml'), '--name', `ferry-${Date.now()}`, ws], { cwd: ws, env: tempestEnv(ws) });
  if (init.code !== 0) throw new Error(`tempest init ${ws} failed (${init.code}):\n${init.output}`);
  await writeFile(join(ws, 'etc', 'tempest.conf'), tempestConf(inputs));
  if (inputs.credentials === 'accounts') await writeFile(join(ws, 'etc', 'accounts.yaml'), accountsYaml(accounts));
}

/** The ids Tempest would run (a dry run: no stack needed), with or without the exclude list. */
export async function listTests(workspace: string, regex: string, exclude?: string): Promise<string[]> {
  const args = ['run', '--list-tests', '--regex', regex, ...(exclude ? ['--exclude-list', exclude] : [])];
  const r = await run('tempest', args, { cwd: workspace, env: tempestEnv(workspace) });
  if (r.code !== 0) throw new Error(`tempest ${args.join(' ')} failed (${r.code}):\n${r.output}`);
  return r.output
    .split('\n')
    .filter((l) => l.startsWith('tempest.'))
    .map((l) => l.split('[')[0]!.trim());
}

export async function runTempest(
  workspace: string,
  options: { regex: string; exclude?: string; concurrency: number; echo?: (s: string) => void },
): Promise<{ code: number | null; results: TestResult[] }> {
  const args = ['run', '--regex', options.regex, '--concurrency', String(options.concurrency), ...(options.exclude ? ['--exclude-list', options.exclude] : [])];
  const r = await run('tempest', args, { cwd: workspace, env: tempestEnv(workspace), echo: options.echo });
  return { code: r.code, results: await lastResults(workspace) };
}

/** The last run's results: stestr's subunit stream through ./results.py. */
export async function lastResults(workspace: string): Promise<TestResult[]> {
  const subunit = await new Promise<Buffer>((resolve, reject) => {
    const child = spawn('stestr', ['last', '--subunit'], { cwd: workspace });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => chunks.push(d));
    child.on('error', reject);
    child.on('close', () => resolve(Buffer.concat(chunks)));
  });
  const parsed = await new Promise<string>((resolve, reject) => {
    const child = spawn('/usr/bin/python3', [join(here, 'results.py')]);
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`results.py failed (${code}): ${err}`))));
    child.stdin.end(subunit);
  });
  return parsed
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as TestResult);
}

export interface Counts {
  passed: number;
  failed: number;
  skipped: number;
}

export interface Summary {
  groups: Record<string, Counts & { selected: number; excluded: number }>;
  total: Counts & { selected: number; excluded: number; passRate: number };
  failures: { id: string; reason: string }[];
  /** Failures grouped by their cause (the traceback's last line, ids and numbers blanked). */
  causes: { cause: string; count: number; tests: string[] }[];
  skips: { reason: string; count: number }[];
}

const count = (rs: TestResult[]): Counts => ({
  passed: rs.filter((r) => r.status === 'success' || r.status === 'xfail').length,
  failed: rs.filter((r) => r.status === 'fail' || r.status === 'uxsuccess').length,
  skipped: rs.filter((r) => r.status === 'skip').length,
});

/**
 * The cause of a failure: the last exception line of its traceback (Tempest's own exceptions say
 * `tempest.lib.exceptions.NotFound: Object not found` then `Details: {...}` on the next line, the
 * response body, which is the useful part), with uuids, hex ids, Tempest's random names and numbers
 * blanked so that failures of one cause group together.
 */
export function causeOf(reason: string): string {
  const lines = reason.split('\n').map((l) => l.trim()).filter(Boolean);
  let at = -1;
  lines.forEach((l, i) => {
    if (/^[\w.]+(Error|Exception|NotFound|BadRequest|Conflict|Forbidden|Unauthorized|ServerFault|TimeoutException|Failure|MismatchError|InvalidHTTPResponseBody|UnexpectedResponseCode|[A-Z]\w+)(: |$)/.test(l) && !l.startsWith('File ')) at = i;
  });
  let cause = at >= 0 ? lines[at]! : (lines.at(-1) ?? '');
  const details = at >= 0 ? lines.slice(at + 1).find((l) => l.startsWith('Details:')) : undefined;
  if (details) cause = `${cause.split(':')[0]}: ${details.slice(0, 400)}`;
  return cause
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, '<id>')
    .replace(/\b[0-9a-f]{32}\b/gi, '<id>')
    .replace(/tempest-[A-Za-z0-9-]+/g, 'tempest-<name>')
    .replace(/0x[0-9a-f]+/gi, '0x…')
    .replace(/\d+(\.\d+)?/g, 'N')
    .slice(0, 300);
}

/**
 * One result per test that was to run. A class whose setUpClass failed (or skipped) reports that
 * once, as `setUpClass (module.Class)`, and nothing for its tests: each of them gets the class's
 * status and reason, so a broken fixture counts as the tests it blocks. A test with no result at
 * all (a worker that died) counts as failed. tearDownClass errors are cleanup, not a test: left out.
 */
export function perTest(results: TestResult[], kept: string[]): TestResult[] {
  const classOf = (id: string) => id.slice(0, id.lastIndexOf('.'));
  const fixture = new Map<string, TestResult>();
  const byId = new Map<string, TestResult>();
  for (const r of results) {
    const m = /^(setUpClass|tearDownClass) \((.+)\)$/.exec(r.id);
    if (m) {
      if (m[1] === 'setUpClass') fixture.set(m[2]!, r);
    } else byId.set(r.id, r);
  }
  const out = kept.map((id) => {
    const own = byId.get(id);
    if (own) return own;
    const f = fixture.get(classOf(id));
    return f ? { id, status: f.status, reason: `setUpClass: ${f.reason}` } : { id, status: 'fail' as const, reason: 'no result: the test did not report (its worker died, or the run was cut short)' };
  });
  // A result for a test outside the kept list (a regex that is wider than the listing): keep it too.
  const keptSet = new Set(kept);
  return [...out, ...[...byId.values()].filter((r) => !keptSet.has(r.id))];
}

export function summarize(raw: TestResult[], selected: string[], kept: string[]): Summary {
  const results = perTest(raw, kept);
  const inGroup = (prefix: string) => (id: string) => id.startsWith(prefix);
  const groups: Summary['groups'] = {};
  for (const g of GROUPS) {
    const sel = selected.filter(inGroup(g.prefix)).length;
    groups[g.name] = { selected: sel, excluded: sel - kept.filter(inGroup(g.prefix)).length, ...count(results.filter((r) => inGroup(g.prefix)(r.id))) };
  }
  const total = count(results);
  const failures = results.filter((r) => r.status === 'fail' || r.status === 'uxsuccess').map((r) => ({ id: r.id, reason: r.reason }));
  const byCause = new Map<string, string[]>();
  for (const f of failures) byCause.set(causeOf(f.reason), [...(byCause.get(causeOf(f.reason)) ?? []), f.id]);
  const bySkip = new Map<string, number>();
  for (const r of results.filter((x) => x.status === 'skip')) bySkip.set(r.reason, (bySkip.get(r.reason) ?? 0) + 1);
  return {
    groups,
    total: {
      selected: selected.length,
      excluded: selected.length - kept.length,
      ...total,
      // Of the tests that ran: a skip is Tempest's own decision from a documented flag (docs/conformance.md).
      passRate: total.passed + total.failed === 0 ? 0 : total.passed / (total.passed + total.failed),
    },
    failures,
    causes: [...byCause].map(([cause, tests]) => ({ cause, count: tests.length, tests })).sort((a, b) => b.count - a.count),
    skips: [...bySkip].map(([reason, n]) => ({ reason, count: n })).sort((a, b) => b.count - a.count),
  };
}

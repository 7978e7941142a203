/**
 * `npm run conformance`: OpenStack's own API tests (Tempest) against a fresh local stack (issue 15).
 *
 *   npm run conformance                 the whole selection (GROUPS), exclude.txt applied
 *   npm run conformance -- --list       a dry run: the selection and exclusion counts, no stack
 *   npm run conformance -- --regex R    another selection (Tempest's --regex), same exclusions
 *
 * It starts `npm start` on a new data directory and a free port, reads the clouds.yaml it writes,
 * writes Tempest's configuration into a new workspace (`tempest init`), runs Tempest with
 * --concurrency 2 at most (FERRY_CONFORMANCE_CONCURRENCY), prints passed/failed/skipped per group
 * and in total, the failures grouped by cause, and writes <workspace>/summary.json. Exit 1 when
 * fewer than 90% of the tests that ran passed (FERRY_CONFORMANCE_MIN_RATE), 2 when it could not run.
 * Credentials: dynamic (Tempest makes a project and users per test class through Ferry's identity)
 * when the admin may create projects, else the pre-provisioned accounts of clouds.yaml;
 * FERRY_CONFORMANCE_CREDENTIALS=dynamic|accounts chooses.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { npmStart, type NpmStartStack } from '../support/npm-start.js';
import type { Account, TempestInputs } from './config.js';
import { canCreateCredentials, cloudsAccounts, issueToken, stackInputs, StackClient } from './inputs.js';
import { EXCLUDE_FILE, GROUPS, initWorkspace, listTests, perTest, runTempest, SELECTION, summarize, type Summary, type TestResult } from './tempest.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export interface ConformanceRun {
  summary: Summary;
  results: TestResult[];
  workspace: string;
}

/** Extra member accounts for pre-provisioned credentials: one per worker, and an alt user. */
async function provisionAccounts(admin: StackClient, base: Account, n: number): Promise<Account[]> {
  const roles = await admin.call('GET', '/identity/v3/roles?name=member');
  const role = roles.body?.roles?.[0]?.id as string | undefined;
  if (!role) return [];
  const made: Account[] = [];
  for (let i = 1; i <= n; i++) {
    const name = `tempest-${i}`;
    const password = `pw-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
    const p = await admin.call('POST', '/identity/v3/projects', { project: { name, domain_id: 'default' } });
    if (p.status !== 201) break;
    const u = await admin.call('POST', '/identity/v3/users', { user: { name, password, domain_id: 'default', default_project_id: p.body.project.id } });
    if (u.status !== 201) break;
    const a = await admin.call('PUT', `/identity/v3/projects/${p.body.project.id}/users/${u.body.user.id}/roles/${role}`);
    if (a.status >= 300) break;
    made.push({ ...base, username: name, password, projectName: name, roles: ['member'] });
  }
  return made;
}

/** Configures a workspace for the stack at `stack` and runs `regex` (minus exclude.txt) in it. */
export async function conformance(
  stack: Pick<NpmStartStack, 'url' | 'dataDir'>,
  options: { regex: string; concurrency: number; workspace?: string; echo?: (s: string) => void },
): Promise<ConformanceRun> {
  const workspace = options.workspace ?? (await mkdtemp(join(tmpdir(), 'ferry-tempest-')));
  const { admin, demo } = await cloudsAccounts(stack.dataDir);
  const adminClient = new StackClient(stack.url, await issueToken(stack.url, admin));
  const wanted = process.env.FERRY_CONFORMANCE_CREDENTIALS;
  const credentials: TempestInputs['credentials'] =
    wanted === 'dynamic' || wanted === 'accounts' ? wanted : (await canCreateCredentials(adminClient)) ? 'dynamic' : 'accounts';
  let accounts = [admin, demo];
  let concurrency = options.concurrency;
  if (credentials === 'accounts') {
    accounts = [...accounts, ...(await provisionAccounts(adminClient, demo, concurrency + 1))];
    // Each worker holds a primary account and some tests an alt one: with demo alone, one worker.
    if (accounts.length < 4) concurrency = 1;
  }
  const inputs = await stackInputs(stack.url, workspace, admin, adminClient, credentials);
  await initWorkspace(inputs, accounts);
  options.echo?.(`tempest workspace ${workspace} (credentials: ${credentials}, concurrency ${concurrency})\n`);
  const selected = await listTests(workspace, options.regex);
  const kept = await listTests(workspace, options.regex, EXCLUDE_FILE);
  const { results } = await runTempest(workspace, { regex: options.regex, exclude: EXCLUDE_FILE, concurrency, echo: options.echo });
  const summary = summarize(results, selected, kept);
  await writeFile(join(workspace, 'summary.json'), JSON.stringify(summary, null, 2));
  return { summary, results: perTest(results, kept), workspace };
}

export function report(s: Summary): string {
  const row = (name: string, c: { selected: number; excluded: number; passed: number; failed: number; skipped: number }) =>
    `${name.padEnd(38)} ${String(c.selected).padStart(8)} ${String(c.excluded).padStart(8)} ${String(c.passed).padStart(6)} ${String(c.failed).padStart(6)} ${String(c.skipped).padStart(7)}`;
  const lines = [row('group', { selected: 'selected', excluded: 'excluded', passed: 'passed', failed: 'failed', skipped: 'skipped' } as never)];
  for (const g of GROUPS) lines.push(row(g.name, s.groups[g.name]!));
  lines.push(row('total', s.total));
  lines.push(`pass rate (passed of passed + failed): ${(s.total.passRate * 100).toFixed(1)}%`);
  if (s.causes.length) {
    lines.push('', 'failures by cause:');
    for (const c of s.causes) lines.push(`  ${String(c.count).padStart(4)}  ${c.cause}`, ...c.tests.slice(0, 5).map((t) => `          ${t}`), ...(c.tests.length > 5 ? [`          … ${c.tests.length - 5} more`] : []));
  }
  if (s.skips.length) {
    lines.push('', 'skips by reason:');
    for (const k of s.skips) lines.push(`  ${String(k.count).padStart(4)}  ${k.reason.split('\n')[0]!.slice(0, 160)}`);
  }
  return lines.join('\n');
}

async function dryRun(regex: string): Promise<void> {
  const ws = await mkdtemp(join(tmpdir(), 'ferry-tempest-list-'));
  try {
    const { run } = await import('./tempest.js');
    const init = await run('tempest', ['init', '--workspace-path', join(ws, 'workspace.yaml'), ws], { cwd: ws });
    if (init.code !== 0) throw new Error(init.output);
    const selected = await listTests(ws, regex);
    const kept = await listTests(ws, regex, EXCLUDE_FILE);
    for (const g of GROUPS) {
      const n = selected.filter((id) => id.startsWith(g.prefix)).length;
      const k = kept.filter((id) => id.startsWith(g.prefix)).length;
      console.log(`${g.name.padEnd(38)} selected ${String(n).padStart(4)}  excluded ${String(n - k).padStart(4)}  to run ${String(k).padStart(4)}`);
    }
    console.log(`${'total'.padEnd(38)} selected ${String(selected.length).padStart(4)}  excluded ${String(selected.length - kept.length).padStart(4)}  to run ${String(kept.length).padStart(4)}`);
  } finally {
    await rm(ws, { recursive: true, force: true });
  }
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const at = args.indexOf('--regex');
  const regex = at >= 0 ? args[at + 1]! : SELECTION;
  if (args.includes('--list')) {
    await dryRun(regex);
    return 0;
  }
  const concurrency = Math.min(2, Math.max(1, Number(process.env.FERRY_CONFORMANCE_CONCURRENCY ?? 2)));
  const minRate = Number(process.env.FERRY_CONFORMANCE_MIN_RATE ?? 0.9);
  const dataDir = await mkdtemp(join(tmpdir(), 'ferry-conformance-'));
  let stack: NpmStartStack | undefined;
  try {
    console.log(`starting the local stack on ${dataDir}`);
    stack = await npmStart({ cwd: repo, dataDir });
    console.log(`ferry ready ${stack.url}`);
    const { summary, workspace } = await conformance(stack, { regex, concurrency, echo: (s) => process.stdout.write(s) });
    console.log(`\n${report(summary)}\n\nsummary: ${join(workspace, 'summary.json')}; Tempest's log: ${join(workspace, 'logs', 'tempest.log')}`);
    if (summary.total.passRate < minRate) {
      console.log(`conformance: ${(summary.total.passRate * 100).toFixed(1)}% passed, under ${minRate * 100}%`);
      return 1;
    }
    return 0;
  } catch (e) {
    console.error(`conformance: could not run: ${(e as Error).stack ?? e}`);
    if (stack) console.error(`the stack printed:\n${stack.log().slice(-4000)}`);
    return 2;
  } finally {
    await stack?.stop().catch((e) => console.error(`stopping the stack: ${(e as Error).message}`));
    await rm(dataDir, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then((code) => process.exit(code));
}

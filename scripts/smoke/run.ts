/**
 * `npm run smoke -- --endpoint URL --token TOKEN [--project P] [--instance HOST]`: drives every
 * capability the endpoint's inventory supports with the upstream CLIs, set up as docs/aws.md tells
 * a user (its tested block), checks the states each step must reach, runs `ferry audit` where it
 * can reach the stack's tables, and prints a table. Exit 0 when nothing failed (skips are not
 * failures: each says what the endpoint lacks), 1 when a check failed, 2 on a wrong command line.
 *
 * URL is the API's base (the stack output ApiUrl; locally http://127.0.0.1:8780/). The token must be
 * an admin's (replication and migrations are admin actions): `ferry token create --admin` on AWS,
 * `admin:admin` locally. --instance is the connector host of the attachment check: an EC2 instance
 * id for EBS backends; locally any host name will do and `smoke-host` is the default.
 */
import { execFile } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import type { Target } from './cli.js';
import { serverCheck } from './compute.js';
import { Skip, replicationCheck, shareMigrationCheck, volumeCheck, type Check } from './storage.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

interface Row {
  check: string;
  result: 'pass' | 'FAIL' | 'skipped';
  seconds: number;
  detail: string;
}

/** `ferry audit` against the stack: the local one of FERRY_DATA_DIR, or a deployed one through FERRY_TABLE_*. */
const auditCheck: Check = {
  name: 'ferry audit',
  async run() {
    try {
      const { stdout } = await promisify(execFile)('node', ['--import', 'tsx', 'bin/ferry.ts', 'audit'], { cwd: REPO, env: process.env, timeout: 300_000 });
      return stdout.trim().split('\n').slice(-1)[0] ?? 'clean';
    } catch (e) {
      const err = e as { code?: number; stdout?: string; stderr?: string };
      if (err.code === 2) throw new Skip(`cannot reach the stack's tables: ${(err.stderr ?? '').trim().split('\n')[0]}`);
      throw new Error(`findings:\n${(err.stdout ?? '').trim()}`);
    }
  },
};

export async function smoke(target: Target, options: { instance?: string }, print: (line: string) => void): Promise<Row[]> {
  const checks = [volumeCheck(options.instance), replicationCheck, shareMigrationCheck, serverCheck, auditCheck];
  const rows: Row[] = [];
  for (const c of checks) {
    const started = Date.now();
    let row: Row;
    try {
      row = { check: c.name, result: 'pass', seconds: 0, detail: await c.run(target) };
    } catch (e) {
      row = { check: c.name, result: e instanceof Skip ? 'skipped' : 'FAIL', seconds: 0, detail: (e as Error).message };
    }
    row.seconds = Math.round((Date.now() - started) / 100) / 10;
    print(`${row.result.padEnd(7)} ${c.name} (${row.seconds} s): ${row.detail}`);
    rows.push(row);
  }
  return rows;
}

export function formatRows(rows: Row[]): string {
  const widths = [Math.max(5, ...rows.map((r) => r.check.length)), 7, 7];
  const line = (cells: string[]) => `| ${cells.map((c, i) => (i < 3 ? c.padEnd(widths[i]!) : c)).join(' | ')} |`;
  return [line(['check', 'result', 'seconds', 'detail']), ...rows.map((r) => line([r.check, r.result, String(r.seconds), r.detail.split('\n')[0]!]))].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, strict: true, options: { endpoint: { type: 'string' }, token: { type: 'string' }, project: { type: 'string' }, instance: { type: 'string' } } });
  if (!values.endpoint || !values.token) {
    console.error('usage: npm run smoke -- --endpoint URL --token TOKEN [--project P] [--instance HOST]');
    return 2;
  }
  const api = values.endpoint.endsWith('/') ? values.endpoint : `${values.endpoint}/`;
  const local = /^https?:\/\/(127\.0\.0\.1|localhost)[:/]/.test(api);
  // The local stack's noauth token is `user:project`; a minted token's project must be given.
  const project = values.project ?? (values.token.includes(':') ? values.token.split(':')[1]! : undefined);
  if (!project) {
    console.error('smoke: --project is needed with a minted token (the project the token was created for)');
    return 2;
  }
  const rows = await smoke({ api, token: values.token, project }, { instance: values.instance ?? (local ? 'smoke-host' : undefined) }, (l) => console.log(l));
  console.log(`\n${formatRows(rows)}`);
  return rows.some((r) => r.result === 'FAIL') ? 1 : 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2));

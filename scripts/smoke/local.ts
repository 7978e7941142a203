/**
 * `npm run smoke:local`: the smoke test against a fresh local stack, as CI runs it. Starts
 * `npm start`'s stack on a temporary data directory and a free port, runs `npm run smoke` against
 * it (the audit finds the stack through FERRY_DATA_DIR), stops it cleanly and removes the directory.
 * Exit code: the smoke test's.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatRows, smoke } from './run.js';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const dataDir = await mkdtemp(join(tmpdir(), 'ferry-smoke-'));
process.env.FERRY_DATA_DIR = dataDir;
const stack = spawn(process.execPath, ['--openssl-legacy-provider', '--import', 'tsx', 'infra/local/main.ts'], {
  cwd: REPO,
  env: { ...process.env, FERRY_DATA_DIR: dataDir, FERRY_PORT: '0' },
  stdio: ['ignore', 'pipe', 'inherit'],
});
let exitCode = 1;
try {
  const url = await new Promise<string>((ok, fail) => {
    let seen = '';
    stack.stdout.on('data', (chunk: Buffer) => {
      seen += chunk.toString();
      const m = /ferry ready (http:\/\/\S+)/.exec(seen);
      if (m) ok(m[1]!);
    });
    stack.on('exit', (code) => fail(new Error(`the local stack exited with ${code} before it was ready:\n${seen}`)));
  });
  console.log(`smoke: local stack at ${url} (data ${dataDir})`);
  const rows = await smoke({ api: `${url}/`, token: 'admin:admin', project: 'admin' }, { instance: 'smoke-host' }, (l) => console.log(l));
  console.log(`\n${formatRows(rows)}`);
  const required = rows.filter((r) => r.result !== 'pass');
  // The sandbox has every capability: here a skip is a failure too.
  exitCode = required.length === 0 ? 0 : 1;
  if (required.length) console.error(`smoke: not passed against the sandbox: ${required.map((r) => r.check).join(', ')}`);
} finally {
  stack.kill('SIGTERM');
  await new Promise((r) => stack.once('exit', r));
  await rm(dataDir, { recursive: true, force: true });
}
process.exitCode = exitCode;

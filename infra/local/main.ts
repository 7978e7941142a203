/**
 * `npm start`: the embedded local stack, data in FERRY_DATA_DIR (default `.ferry`), HTTP on
 * FERRY_PORT (default 8780). Ctrl-C (or SIGTERM) stops it cleanly; running executions resume on
 * the next start. One stack per data directory: a second start on it exits at once (code 1),
 * naming the running one.
 */
import { resolve } from 'node:path';
import { acquireDataDirLock, DataDirInUse, type DataDirLock } from './data-dir-lock.js';

// aws-local-stepfunctions needs Promise.withResolvers on Node 20: installed before the library loads
// (stack.js is imported dynamically below for that reason).
import './polyfills.js';

const DEFAULT_DATA_DIR = '.ferry';
const DEFAULT_PORT = 8780;

const dataDir = resolve(process.env.FERRY_DATA_DIR ?? DEFAULT_DATA_DIR);
const port = process.env.FERRY_PORT ? Number(process.env.FERRY_PORT) : DEFAULT_PORT;

// The lock first, before the stack's modules load: a second start on the directory says so at once.
let lock: DataDirLock;
try {
  lock = acquireDataDirLock(dataDir);
} catch (e) {
  if (!(e instanceof DataDirInUse)) throw e;
  console.error(`ferry: ${e.message}`);
  process.exit(1);
}

const { FUNCTIONS } = await import('../../functions/wiring.js');
const { startLocalStack } = await import('./stack.js');
const { STEP_FUNCTIONS_PATH } = await import('./http.js');

const stack = await startLocalStack({ dataDir, port, lock });

const health = await fetch(`${stack.url}/healthz`);
if (!health.ok) throw new Error(`the local stack does not answer on ${stack.url}/healthz (${health.status})`);

const line = (label: string, url: string) => `  ${label.padEnd(8)} ${url}`;
const lines = [`ferry ready ${stack.url}`];
for (const f of FUNCTIONS) {
  if (f.kind !== 'api' || !f.httpPrefix) continue;
  // The versioned root (`/volume/v3`) is the longest public path; clients are pointed there.
  const root = [...(f.publicPaths ?? [])].sort((a, b) => b.length - a.length)[0] ?? f.httpPrefix;
  lines.push(line(f.name.replace(/-api$/, ''), stack.url + root));
}
lines.push(line('healthz', `${stack.url}/healthz`));
lines.push(line('stepfunctions', stack.url + STEP_FUNCTIONS_PATH));
console.log(lines.join('\n'));

let stopping = false;
const shutdown = (signal: string) => {
  if (stopping) return;
  stopping = true;
  console.log(`ferry: ${signal}, stopping`);
  stack.stop().then(
    () => process.exit(0),
    (e) => {
      console.error('ferry: stop failed:', e);
      process.exit(1);
    },
  );
};
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('SIGTERM', () => shutdown('SIGTERM'));

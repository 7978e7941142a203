/**
 * `npm start` (through start.mjs, which runs this file from the start bundle, start-bundle.mjs):
 * the embedded local stack, data in FERRY_DATA_DIR (default `.ferry`), HTTP on FERRY_PORT (default 8780). One stack per data directory: a second start on it exits at once
 * (code 1), naming the running one.
 *
 * Starting prints a line per stage with its time (start-stages.ts), then "ferry ready"; the
 * reconcile's line comes when it ends, after "ferry ready" (it runs while requests are served). The
 * DynamoDB Local JVM, the slowest stage, is launched right after the lock, before the stack's
 * modules load, so the JVM and Node's loading run side by side on two cores.
 *
 * Stopping: SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the whole stack within STOP_DEADLINE_MS;
 * running executions resume on the next start. npm forwards SIGINT and SIGTERM to this process
 * (package.json's start script execs node: no shell in between to swallow them). A kill -9 of npm
 * reparents this process, which then stops itself (parent-watch.ts); a kill -9 of this process
 * takes DynamoDB Local with it (dynamo-process.ts: the kernel's parent-death signal).
 */
import { get } from 'node:http';
import { join, resolve } from 'node:path';
import { acquireDataDirLock, DataDirInUse, type DataDirLock } from './data-dir-lock.js';
import { DYNAMO_SUBDIR, launchDynamo } from './dynamo-process.js';
import { stopOrphanedDynamo } from './orphaned-dynamo.js';
import { watchParent } from './parent-watch.js';
import { quietAwsSdk } from './quiet-sdk.js';
import { startStages } from './start-stages.js';
import type { LocalStack } from './stack.js';

// aws-local-stepfunctions needs Promise.withResolvers on Node 20: installed before the library loads
// (stack.js is imported dynamically below for that reason).
import './polyfills.js';

const DEFAULT_DATA_DIR = '.ferry';
const DEFAULT_PORT = 8780;
/** A stop that takes longer (a hung close) is cut short: the promise is "stopped within 5 s". */
const STOP_DEADLINE_MS = 4000;

// Before any AWS SDK client exists, here and in the copy workers this process starts.
quietAwsSdk();

const dataDir = resolve(process.env.FERRY_DATA_DIR ?? DEFAULT_DATA_DIR);
const port = process.env.FERRY_PORT ? Number(process.env.FERRY_PORT) : DEFAULT_PORT;
const stages = startStages((line) => console.log(line));

// The lock first, before the stack's modules load: a second start on the directory says so at once.
let lock: DataDirLock;
try {
  lock = await stages.run('lock', () => acquireDataDirLock(dataDir));
} catch (e) {
  if (!(e instanceof DataDirInUse)) throw e;
  console.error(`ferry: ${e.message}`);
  process.exit(1);
}

// A stack killed alone before (its JVM outlived it where there is no parent-death signal) left
// DynamoDB Local on these files: stopped before a new one opens them.
const dbPath = join(dataDir, DYNAMO_SUBDIR);
await stopOrphanedDynamo(dbPath);
const dynamo = await launchDynamo({ dataDir: dbPath });

let stopping = false;
// Until the stack runs, a stop has only the JVM and the lock to end (the rest lives in this process).
let stopStack = async () => {
  await dynamo.stop();
  lock.release();
};
const shutdown = (why: string) => {
  if (stopping) return;
  stopping = true;
  console.log(`ferry: ${why}, stopping`);
  // First: a class archive's writer gets the stop's whole time to finish (dynamo-cds-writer.ts);
  // the JVM's stop, last in stopStack, waits for it. It never rejects.
  void dynamo.stopArchiveWriter();
  const deadline = setTimeout(() => {
    console.error(`ferry: the stop did not finish within ${STOP_DEADLINE_MS / 1000} s; exiting (DynamoDB Local ends with this process)`);
    process.exit(1);
  }, STOP_DEADLINE_MS);
  deadline.unref();
  stopStack().then(
    () => process.exit(process.exitCode ?? 0),
    (e: unknown) => {
      console.error('ferry: stop failed:', e);
      process.exit(1);
    },
  );
};
// From the first instant the JVM runs: a signal while starting stops what has started.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => shutdown(signal));
// A closed terminal or pipe (the reader of our output is gone, as with SIGHUP) must not crash the
// stop half way: the lines are for nobody then. Any other output error is real.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') return shutdown('the output is closed');
    throw e;
  });
}
if (process.env.npm_lifecycle_event === 'start') watchParent(() => shutdown('npm (the parent process) is gone'));

const { FUNCTIONS, startLocalStack, STEP_FUNCTIONS_PATH } = await stages.run('modules', async () => ({
  ...(await import('../../functions/wiring.js')),
  ...(await import('./stack.js')),
  ...(await import('./http.js')),
}));

let stack: LocalStack;
try {
  stack = await startLocalStack({ dataDir, port, lock, dynamo, stages });
} catch (e) {
  if (!stopping) throw e;
  // A signal while starting stopped the JVM under the start, which fails for it; shutdown() exits.
  console.error(`ferry: the start was interrupted: ${(e as Error).message}`);
  await new Promise<never>(() => undefined);
  throw e;
}
stopStack = () => stack.stop();
// The start's reconcile pass runs on after "ferry ready" (stack.ts reconcileInBackground); its stage
// line and its log line say when it ended. Resuming the previous executions after it cannot fail
// quietly: the stack stops, with the reason.
stack.reconciled.catch((e: unknown) => {
  console.error('ferry: resuming the previous executions failed:', e);
  process.exitCode = 1;
  shutdown('resuming the previous executions failed');
});

// Through node:http, which the stack has loaded already: the first fetch() loads undici (~0.09 s
// of CPU, measured here against ~0.02 s for a first http.get), on the path to "ferry ready".
const healthStatus = await new Promise<number | undefined>((resolve, reject) => {
  get(`${stack.url}/healthz`, (res) => {
    res.resume();
    res.on('end', () => resolve(res.statusCode));
  }).on('error', reject);
});
if (healthStatus !== 200) throw new Error(`the local stack does not answer on ${stack.url}/healthz (${healthStatus})`);

const line = (label: string, url: string) => `  ${label.padEnd(8)} ${url}`;
const lines = [`ferry ready ${stack.url}`];
for (const f of FUNCTIONS) {
  if (f.kind !== 'api' || !f.httpPrefix) continue;
  // The versioned root (`/volume/v3`) is the longest public path; clients are pointed there.
  const root = [...(f.publicPaths ?? [])].sort((a, b) => b.length - a.length)[0] ?? f.httpPrefix;
  lines.push(line(f.name.replace(/-api$/, ''), stack.url + root));
}
lines.push(line('healthz', `${stack.url}/healthz`));
lines.push(line('clouds.yaml', `${stack.cloudsYaml} (openstack --os-cloud ferry-demo, with OS_CLIENT_CONFIG_FILE set to it)`));
lines.push(line('stepfunctions', stack.url + STEP_FUNCTIONS_PATH));
console.log(lines.join('\n'));

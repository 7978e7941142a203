/**
 * Two `npm start` on one data directory (issue 11): the second exits at once, non-zero, naming the
 * running one, and touches nothing; the first keeps running and `ferry audit` still finds it. A
 * kill -9 of the first (its whole process group, as a crash) leaves a stale lock the next start
 * takes over. The stacks are real child processes, started as package.json's start script does.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, test } from 'vitest';
import { processAlive, STACK_FILE, type LockRecord } from '../../infra/local/data-dir-lock.js';
import { REPO_ROOT } from '../../infra/local/http.js';
import { dynamoProcessesOn } from '../../infra/local/orphaned-dynamo.js';
import { freePort } from '../../infra/local/ports.js';
import { eventually } from '../support/poll.js';

/** package.json's start script: the start bundle's launcher (infra/local/start.mjs). */
const START = ['--openssl-legacy-provider', 'infra/local/start.mjs'];
const children: ChildProcess[] = [];
let dataDir: string | undefined;

/** The environment of a stack (or `ferry audit`) on `dir`: none of this process's endpoints, faults or table prefix. */
function envFor(dir: string, port?: number): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, FERRY_DATA_DIR: dir, ...(port ? { FERRY_PORT: String(port) } : {}) };
  for (const k of ['FERRY_DYNAMODB_ENDPOINT', 'FERRY_S3_ENDPOINT', 'FERRY_SFN_ENDPOINT', 'FERRY_FAULTS', 'FERRY_TABLE_PREFIX', 'FERRY_TABLE_VOLUME']) delete env[k];
  return env;
}

interface Started {
  child: ChildProcess;
  /** Resolves with the URL on "ferry ready"; rejects if the process exits first. */
  ready: Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr: () => string;
}

/** `npm start`'s command, in a process group of its own (so a crash can kill the group, JVM included). */
function start(dir: string, port: number): Started {
  const child = spawn(process.execPath, START, { cwd: REPO_ROOT, env: envFor(dir, port), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.push(child);
  const err: string[] = [];
  child.stderr!.on('data', (d) => err.push(String(d)));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => child.once('exit', (code, signal) => done({ code, signal })));
  const ready = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^ferry ready (\S+)/.exec(line);
      if (m) resolve(m[1]!);
    });
    void exited.then(({ code, signal }) => reject(new Error(`the stack exited (${code ?? signal}) before it was ready: ${err.join('')}`)));
  });
  ready.catch(() => undefined);
  return { child, ready, exited, stderr: () => err.join('') };
}

/** The DynamoDB Local JVMs running on `dir`'s files (without setpriv's parent-death signal they outlive a kill -9 of their parent alone). */
function jvmsOn(dir: string): number[] {
  return dynamoProcessesOn(join(dir, 'dynamodb'));
}

function audit(dir: string) {
  return spawnSync(process.execPath, ['--import', 'tsx', 'bin/ferry.ts', 'audit'], { cwd: REPO_ROOT, env: envFor(dir), encoding: 'utf8', timeout: 90_000 });
}

function readStackJson(dir: string): { url: string; pid: number; dynamodbEndpoint: string } {
  return JSON.parse(readFileSync(join(dir, STACK_FILE), 'utf8'));
}

function topLock(dir: string): LockRecord {
  const top = readdirSync(join(dir, 'lock'))
    .filter((n) => /^gen-\d+\.json$/.test(n))
    .sort((a, b) => Number(b.slice(4, -5)) - Number(a.slice(4, -5)))[0]!;
  return JSON.parse(readFileSync(join(dir, 'lock', top), 'utf8'));
}

function killGroup(child: ChildProcess): void {
  if (child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
  }
}

afterAll(async () => {
  for (const c of children) killGroup(c);
  if (dataDir) {
    for (const pid of jvmsOn(dataDir)) process.kill(pid, 'SIGKILL');
    await rm(dataDir, { recursive: true, force: true });
  }
});


/**
 * The database files of DynamoDB Local in `dataDir`, but for SQLite's rollback journal: the
 * running first stack's own writes (its reconciler, its replicator) create and delete it at any
 * moment, so its presence says nothing about what a second start did (a CI run caught it there).
 */
function databaseFiles(dataDir: string): string[] {
  return readdirSync(join(dataDir, 'dynamodb')).filter((name) => !name.endsWith('-journal')).sort();
}
describe('one local stack per data directory', () => {
  test('a second start exits at once naming the first, which keeps running and auditable; after a kill -9 of the first, a start takes the stale lock over', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'ferry-two-starts-'));
    const port = await freePort();

    // The first stack.
    const first = start(dataDir, port);
    const url = await first.ready;
    const stackJson = readFileSync(join(dataDir, STACK_FILE), 'utf8');
    expect(readStackJson(dataDir)).toMatchObject({ url, pid: first.child.pid });
    const dynamoFiles = databaseFiles(dataDir);
    const lockFiles = existsSync(join(dataDir, 'lock')) ? readdirSync(join(dataDir, 'lock')).sort() : [];
    expect(jvmsOn(dataDir)).toHaveLength(1);

    // A second start on the same directory (another free port, so only the lock can stop it).
    const t0 = Date.now();
    const second = start(dataDir, await freePort());
    const out = await Promise.race([second.exited, new Promise((done) => setTimeout(() => done('still running after 30 s'), 30_000).unref())]);
    const seconds = (Date.now() - t0) / 1000;

    expect(out).toEqual({ code: 1, signal: null });
    expect(seconds).toBeLessThan(15);
    expect(second.stderr()).toContain(
      `ferry: FERRY_DATA_DIR=${dataDir} is in use by a running Ferry stack: pid ${first.child.pid}, ${url}, running since ${topLock(dataDir).since}. ` +
        `Stop that one first (Ctrl-C in its terminal, or \`kill ${first.child.pid}\`), or give this one another FERRY_DATA_DIR.`,
    );
    // It touched nothing: no second DynamoDB Local, the same files, the same stack.json.
    expect(jvmsOn(dataDir)).toHaveLength(1);
    expect(databaseFiles(dataDir)).toEqual(dynamoFiles);
    expect(readdirSync(join(dataDir, 'lock')).sort()).toEqual(lockFiles);
    expect(readFileSync(join(dataDir, STACK_FILE), 'utf8')).toBe(stackJson);
    // The first keeps running, and `ferry audit` finds it through stack.json.
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    const clean = audit(dataDir);
    expect(clean.status, clean.stderr).toBe(0);
    expect(clean.stdout).toContain('audit clean');

    // A crash: kill -9 of the first's whole process group (its DynamoDB Local too).
    const jvm = jvmsOn(dataDir)[0]!;
    killGroup(first.child);
    await first.exited;
    await eventually(async () => (processAlive(jvm) ? undefined : true), 'the crashed stack\'s DynamoDB Local gone');
    // The lock it leaves is stale (not released), and so is stack.json.
    expect(topLock(dataDir)).toMatchObject({ pid: first.child.pid });
    expect(topLock(dataDir).released).toBeUndefined();
    expect(readStackJson(dataDir).pid).toBe(first.child.pid);

    // The next start takes the stale lock over at once, and comes up.
    const third = start(dataDir, port);
    expect(await third.ready).toBe(url);
    expect(topLock(dataDir)).toMatchObject({ pid: third.child.pid });
    expect(readStackJson(dataDir)).toMatchObject({ url, pid: third.child.pid });
    const after = audit(dataDir);
    expect(after.status, after.stderr).toBe(0);

    // A clean stop releases the directory and removes its stack.json.
    third.child.kill('SIGTERM');
    expect(await third.exited).toEqual({ code: 0, signal: null });
    expect(topLock(dataDir).released).toBe(true);
    expect(existsSync(join(dataDir, STACK_FILE))).toBe(false);
    expect(jvmsOn(dataDir)).toEqual([]);
  }, 420_000);
});

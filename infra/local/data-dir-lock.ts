/**
 * One local stack per data directory: an exclusive lock taken before DynamoDB Local starts, so a
 * second `npm start` on the same FERRY_DATA_DIR stops at once, naming the running one, and touches
 * nothing (not DynamoDB Local's files, not `stack.json`).
 *
 * The lock is a sequence of generation files, `<data dir>/lock/gen-<N>.json`, each created
 * atomically (written complete to a temp file, then `link()`ed to its name: fails with EEXIST if
 * the name exists, so a reader never sees half a record). The highest generation says who holds
 * the directory: a live process (pid alive, same process start time: a reused pid is not the
 * holder), or nobody (`released`, or its process is gone: killed -9, crashed). To take the
 * directory, a start creates generation max+1: of several starts that saw the same free max, the
 * kernel lets exactly one create that name. A start that created a number below the current max
 * (it scanned long ago, and files were cleaned up since) lost, and removes its file. Numbers never
 * go down: a clean stop releases by creating generation N+1 marked `released`, never by deleting
 * the max. Staleness is pid liveness, not age, so a restart right after kill -9 takes over at once.
 *
 * `stack.json` (the running stack's URL and endpoints, read by `ferry audit`) belongs to the holder:
 * written after it holds the lock, removed on a clean stop only while it still names the holder.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';

/** Written in the data dir while the stack runs: its URL and service endpoints. */
export const STACK_FILE = 'stack.json';
const LOCK_DIR = 'lock';
const GENERATION = /^gen-(\d+)\.json$/;
const TEMP = /^tmp-(\d+)-/;
/** Each attempt either wins, meets a live holder, or saw a racer create the next generation first. */
const MAX_ATTEMPTS = 50;

/** Who holds (or held) a data directory: one generation file. */
export interface LockRecord {
  pid: number;
  /** The process's start time in clock ticks since boot (Linux /proc), to tell a reused pid. */
  processStart?: string;
  host: string;
  /** When the holder took the lock (ISO 8601). */
  since: string;
  /** Unique per acquisition: two locks in one process are two holders. */
  nonce: string;
  /** A clean stop: the directory is free. */
  released?: boolean;
}

/** The running stack a second start met; the message names it. */
export class DataDirInUse extends Error {
  override name = 'DataDirInUse';
  constructor(
    readonly dataDir: string,
    readonly holder: LockRecord,
    readonly url: string | undefined,
  ) {
    const where = holder.host === hostname() ? `pid ${holder.pid}` : `pid ${holder.pid} on host ${holder.host}`;
    super(
      `FERRY_DATA_DIR=${dataDir} is in use by a running Ferry stack: ${where}, ${url ?? 'no URL yet (still starting)'}, running since ${holder.since}. ` +
        `Stop that one first (Ctrl-C in its terminal, or \`kill ${holder.pid}\`), or give this one another FERRY_DATA_DIR.`,
    );
  }
}

/** The lock could not be judged (an unreadable lock file: left for the operator, never guessed free). */
export class DataDirLockError extends Error {
  override name = 'DataDirLockError';
}

export interface DataDirLock {
  dataDir: string;
  generation: number;
  record: LockRecord;
  /** True while the highest generation is still this holder's. */
  held(): boolean;
  /** Frees the directory; false when it was no longer this holder's (taken over meanwhile). */
  release(): boolean;
}

/** Seams for tests: who "this process" is, and a point between the scan and the create. */
export interface AcquireOptions {
  pid?: number;
  processStart?: string;
  /** Called after each scan found the directory free, before this start creates its generation. */
  beforeCreate?: (generation: number) => void;
}

/** Takes the data directory or throws DataDirInUse naming the running holder. */
export function acquireDataDirLock(dataDir: string, options: AcquireOptions = {}): DataDirLock {
  const dir = join(dataDir, LOCK_DIR);
  mkdirSync(dir, { recursive: true });
  const pid = options.pid ?? process.pid;
  const record: LockRecord = {
    pid,
    ...withProcessStart(options.processStart ?? readProcessStart(pid)),
    host: hostname(),
    since: new Date().toISOString(),
    nonce: randomUUID(),
  };
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const top = highest(dir);
    if (top && !top.record.released && holderAlive(top.record)) throw new DataDirInUse(dataDir, top.record, stackFileUrl(dataDir, top.record));
    const generation = (top?.generation ?? 0) + 1;
    options.beforeCreate?.(generation);
    if (!createGeneration(dir, generation, record)) continue;
    // Created; but a start that scanned long ago may have recreated a cleaned-up low number:
    // only the highest generation holds.
    const now = highest(dir);
    if (now && now.generation !== generation) {
      rmSync(generationPath(dir, generation), { force: true });
      continue;
    }
    removeOlder(dir, generation);
    return lockHandle(dataDir, dir, generation, record);
  }
  throw new DataDirLockError(`could not take ${dir} in ${MAX_ATTEMPTS} attempts: other starts keep creating generations`);
}

function lockHandle(dataDir: string, dir: string, generation: number, record: LockRecord): DataDirLock {
  let released = false;
  return {
    dataDir,
    generation,
    record,
    held: () => !released && highest(dir)?.record.nonce === record.nonce,
    release() {
      if (released) return false;
      released = true;
      // The next generation says "free"; it exists already only if another start took over.
      if (!createGeneration(dir, generation + 1, { ...record, released: true })) return false;
      rmSync(generationPath(dir, generation), { force: true });
      return true;
    },
  };
}

/** The stack file, written by the holder once it knows its endpoints. */
export function writeStackFile(lock: DataDirLock, contents: Record<string, unknown>): void {
  const file = join(lock.dataDir, STACK_FILE);
  const temp = `${file}.${lock.record.nonce}`;
  writeFileSync(temp, JSON.stringify({ ...contents, pid: lock.record.pid, since: lock.record.since, lock: lock.record.nonce }, null, 2));
  // Renamed into place: `ferry audit` never reads half a file.
  renameSync(temp, file);
}

/** Removes the stack file if it is still this holder's; true when it did. */
export function removeOwnStackFile(lock: DataDirLock): boolean {
  const file = join(lock.dataDir, STACK_FILE);
  if (!existsSync(file) || readStackFile(file)?.lock !== lock.record.nonce) return false;
  rmSync(file, { force: true });
  return true;
}

/** What `stack.json` holds (written by writeStackFile). */
export interface StackFile {
  url?: string;
  dynamodbEndpoint?: string;
  s3Endpoint?: string;
  /** The stack's FERRY_TABLE_PREFIX, when it ran with one (the tables are named by it). */
  tablePrefix?: string;
  pid?: number;
  since?: string;
  /** The nonce of the lock its writer held. */
  lock?: string;
}

/**
 * The running stack of `dataDir`: its stack.json when the process that wrote it still holds the
 * directory; undefined when there is none, or the file is left over from a stack that died (kill -9).
 */
export function runningStack(dataDir: string): StackFile | undefined {
  const stack = readStackFile(join(dataDir, STACK_FILE));
  if (!stack) return undefined;
  const dir = join(dataDir, LOCK_DIR);
  const top = existsSync(dir) ? highest(dir) : undefined;
  if (!top || top.record.released || top.record.nonce !== stack.lock || !holderAlive(top.record)) return undefined;
  return stack;
}

function readStackFile(file: string): StackFile | undefined {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as StackFile;
  } catch (e) {
    // Absent (the holder is still starting) or replaced mid-read: no URL to name, not an error.
    if ((e as NodeJS.ErrnoException).code === 'ENOENT' || e instanceof SyntaxError) return undefined;
    throw e;
  }
}

/** The holder's URL from its stack file, when the file is the holder's. */
function stackFileUrl(dataDir: string, holder: LockRecord): string | undefined {
  const stack = readStackFile(join(dataDir, STACK_FILE));
  return stack?.lock === holder.nonce ? stack.url : undefined;
}

function generationPath(dir: string, generation: number): string {
  return join(dir, `gen-${generation}.json`);
}

/** Creates generation `generation` holding `record`; false when that generation exists already. */
function createGeneration(dir: string, generation: number, record: LockRecord): boolean {
  const temp = join(dir, `tmp-${record.pid}-${record.nonce}-${generation}`);
  writeFileSync(temp, JSON.stringify(record));
  try {
    linkSync(temp, generationPath(dir, generation));
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  } finally {
    unlinkSync(temp);
  }
}

function highest(dir: string): { generation: number; record: LockRecord } | undefined {
  for (;;) {
    const generations = readdirSync(dir)
      .map((name) => GENERATION.exec(name)?.[1])
      .filter((n): n is string => n !== undefined)
      .map(Number)
      .sort((a, b) => b - a);
    if (generations.length === 0) return undefined;
    const generation = generations[0]!;
    const path = generationPath(dir, generation);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      // A loser removed its file between the listing and the read: list again.
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw e;
    }
    try {
      return { generation, record: JSON.parse(text) as LockRecord };
    } catch (e) {
      throw new DataDirLockError(`${path} is not a lock record (${(e as Error).message}): if no Ferry stack runs on ${dir}/.., remove ${dir}`);
    }
  }
}

/** Removes generations below `generation` and temp files of processes that are gone. */
function removeOlder(dir: string, generation: number): void {
  for (const name of readdirSync(dir)) {
    const gen = GENERATION.exec(name)?.[1];
    const tempPid = TEMP.exec(name)?.[1];
    if ((gen !== undefined && Number(gen) < generation) || (tempPid !== undefined && !processAlive(Number(tempPid)))) {
      rmSync(join(dir, name), { force: true });
    }
  }
}

function holderAlive(record: LockRecord): boolean {
  // Another machine's process (a shared file system) cannot be checked from here: assume it runs.
  if (record.host !== hostname()) return true;
  return processAlive(record.pid, record.processStart);
}

/** Whether `pid` runs, and (when known) is the process that started at `processStart`. */
export function processAlive(pid: number, processStart?: string): boolean {
  // kill(0 or a negative pid) signals a whole process group, which would answer "alive" for a pid
  // read from an empty or broken file.
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new RangeError(`not a process id: ${pid}`);
  try {
    process.kill(pid, 0);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ESRCH') return false;
    // EPERM: it runs, as another user.
    if (code !== 'EPERM') throw e;
  }
  const stat = readProcStat(pid);
  if (!stat) return true;
  // A zombie (killed, not yet reaped) holds nothing.
  if (stat.state === 'Z' || stat.state === 'X') return false;
  return processStart === undefined || stat.start === processStart;
}

/** The process's start time from /proc (Linux); undefined elsewhere. */
export function readProcessStart(pid: number): string | undefined {
  return readProcStat(pid)?.start;
}

function readProcStat(pid: number): { state: string; start: string } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (e) {
    // No /proc (macOS) or the process just went: liveness falls back to kill(pid, 0).
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  // Fields after "pid (comm)": state is field 3, starttime field 22 (proc(5)); comm may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: fields[0]!, start: fields[19]! };
}

function withProcessStart(start: string | undefined): { processStart?: string } {
  return start === undefined ? {} : { processStart: start };
}

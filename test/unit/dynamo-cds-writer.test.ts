/**
 * The class archive's writer supervisor (infra/local/dynamo-cds-writer.ts), with a stand-in for the
 * JVM (no JVM in the unit tier): a shell that, on SIGTERM, writes half its archive, takes a while,
 * writes the rest and exits 143 as the JVM does. The archive lands although the process that
 * started the writer was killed (kill -9) before it finished; a write the stack's stop cuts short
 * at the deadline, and one killed mid-write, leave no partial, no claim and no process, and say so.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { processAlive } from '../../infra/local/data-dir-lock.js';
import { archiveWriterArgs, type ArchiveFiles } from '../../infra/local/dynamo-cds-writer.js';
import { parentDeathSignalCommand, withParentDeathSignal } from '../../infra/local/dynamo-process.js';
import { eventually } from '../support/poll.js';

// $1 the partial archive, $2 seconds its write takes after SIGTERM. Its pid goes to "$1.pid".
const STAND_IN = `echo $$ > "$1.pid"; trap 'printf half > "$1"; sleep "$2"; printf archive >> "$1"; exit 143' TERM; while :; do sleep 0.02; done`;
/**
 * A deadline no other process sleeps for: its timer is found by it in /proc. Long enough that a
 * timer left behind outlives noTimerLeft's wait by over a second (a loaded CI machine took more
 * than 250 ms to end a timer killed as it should be).
 */
const DEADLINE_S = 2.737;

const started: ChildProcess[] = [];
const pids: number[] = [];
const dirs: string[] = [];
afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const pid of pids.splice(0)) if (processAlive(pid)) process.kill(pid, 'SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function files(): ArchiveFiles {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-cds-writer-'));
  dirs.push(dir);
  // The plan's claim, as planClassArchive leaves it: this process's pid (the supervisor puts its own).
  writeFileSync(join(dir, 'writing'), String(process.pid));
  return { partial: join(dir, 'classes.jsa.1.2.tmp'), archive: join(dir, 'classes.jsa'), claim: join(dir, 'writing'), lastTry: join(dir, 'last-try') };
}

/** The supervisor's command over the stand-in, taking `writeS` to write after SIGTERM. */
function writerCommand(f: ArchiveFiles, writeS: number): [string, string[]] {
  const jvm = withParentDeathSignal('sh', ['-c', STAND_IN, 'stand-in', f.partial, String(writeS)], 'KILL');
  return withParentDeathSignal('sh', archiveWriterArgs(f, jvm.flat(), parentDeathSignalCommand(), DEADLINE_S));
}

/** The supervisor, started directly from this process; resolves once its stand-in runs. */
async function startWriter(f: ArchiveFiles, writeS: number): Promise<{ supervisor: ChildProcess; standIn: number }> {
  const supervisor = spawn(...writerCommand(f, writeS), { stdio: 'ignore', detached: true });
  started.push(supervisor);
  const standIn = await eventually(() => existsSync(`${f.partial}.pid`) && Number(readFileSync(`${f.partial}.pid`, 'utf8')), 'the stand-in running', { timeoutMs: 5000 });
  pids.push(standIn);
  return { supervisor, standIn };
}

/** Live processes whose arguments (`/proc/<pid>/cmdline`, split) satisfy `matches`. */
function processesWhere(matches: (argv: string[]) => boolean): number[] {
  return readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n) && processAlive(Number(n)))
    .filter((n) => {
      try {
        return matches(readFileSync(`/proc/${n}/cmdline`, 'utf8').split('\0'));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
        throw e;
      }
    })
    .map(Number);
}

/** Live processes sleeping for DEADLINE_S: a deadline timer left behind. */
const timers = (): number[] => processesWhere((argv) => argv.includes(String(DEADLINE_S)));

/**
 * Waits until no deadline timer is left. The supervisor's last act is `kill -KILL` of its timer,
 * which the kernel applies after the supervisor may already have exited (a CI run found the timer
 * and its sleep still running at the first look). A timer the supervisor left would sleep on until
 * its deadline, over a second after this wait (the writes here take 0.2 s or longer); the
 * wait gives up well before.
 */
async function noTimerLeft(): Promise<void> {
  await eventually((note) => note(timers()).length === 0, 'no deadline timer left', { timeoutMs: 1000, intervalMs: 5 });
}

/** The parent of `pid` (`/proc/<pid>/stat`: the field after the command's closing parenthesis and the state). */
function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

/**
 * The live stand-ins writing `f.partial` (its `sh -c STAND_IN stand-in <partial>`), found by their
 * arguments: its pid file cannot say, since a stand-in stopped between creating the file and writing
 * its pid leaves it empty (a CI run read that as pid 0). A stand-in's loop forks a child for each
 * `sleep`, which shows the stand-in's own arguments until it execs (a CI run found one beside the
 * stand-in): a match whose parent is a match is such a child, not another stand-in.
 */
function standIns(f: ArchiveFiles): number[] {
  const matched = processesWhere((argv) => argv[3] === 'stand-in' && argv[4] === f.partial);
  return matched.filter((pid) => !matched.includes(parentOf(pid) ?? -1));
}

/**
 * Waits until no stand-in of `f` is left. A child the stand-in forked just before it was killed
 * shows its arguments until it execs its sleep (a CI run found one right after the stand-in
 * died); a stand-in left behind loops for good, so the wait gives up after 250 ms and fails then.
 */
async function noStandInLeft(f: ArchiveFiles): Promise<void> {
  await eventually((note) => note(standIns(f)).length === 0, 'no stand-in left', { timeoutMs: 250, intervalMs: 5 });
}

const exitOf = (c: ChildProcess) => new Promise<void>((resolve) => (c.exitCode !== null || c.signalCode !== null ? resolve() : c.once('exit', () => resolve())));

describe.runIf(process.platform === 'linux')('the class archive writer supervisor', () => {
  test('the process that started it is killed (kill -9) right away: the write finishes after it, and the archive is put in place', async () => {
    // Prepare: a node parent that starts the writer as dynamo-process.ts does (detached, under the parent-death TERM).
    const f = files();
    const [command, args] = writerCommand(f, 0.2);
    const code = `const c = require('node:child_process').spawn(${JSON.stringify(command)}, ${JSON.stringify(args)}, { stdio: 'ignore', detached: true }); c.on('spawn', () => console.log(c.pid)); setInterval(() => {}, 1000);`;
    const parent = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    started.push(parent);
    const supervisor = await new Promise<number>((resolve) => parent.stdout!.once('data', (d) => resolve(Number(String(d).trim()))));
    pids.push(supervisor);
    const standIn = await eventually(() => existsSync(`${f.partial}.pid`) && Number(readFileSync(`${f.partial}.pid`, 'utf8')), 'the stand-in running', { timeoutMs: 5000 });
    pids.push(standIn);
    expect(readFileSync(f.claim, 'utf8').trim()).toBe(String(supervisor));

    // Act: the parent dies as a kill -9 kills it (none of its code runs).
    parent.kill('SIGKILL');

    // Assess: the archive, whole, in place; no partial, no claim, no process.
    await eventually(() => !processAlive(supervisor), 'the supervisor gone', { timeoutMs: 5000 });
    expect(readFileSync(f.archive, 'utf8')).toBe('halfarchive');
    expect(existsSync(f.partial)).toBe(false);
    expect(existsSync(f.claim)).toBe(false);
    expect(existsSync(f.lastTry)).toBe(false);
    expect(processAlive(standIn)).toBe(false);
    await noTimerLeft();
  });

  test('SIGUSR1 (the writer served its requests): it writes at its own pace, past the deadline, and the archive is kept', async () => {
    const f = files();
    const { supervisor } = await startWriter(f, DEADLINE_S + 0.5);
    supervisor.kill('SIGUSR1');
    await exitOf(supervisor);
    expect(readFileSync(f.archive, 'utf8')).toBe('halfarchive');
    expect(existsSync(f.claim)).toBe(false);
  });

  test('the stack stops (SIGTERM) and the write takes longer than the deadline: killed at it, no partial, no claim, no process, and the next start is told', async () => {
    const f = files();
    const { supervisor, standIn } = await startWriter(f, DEADLINE_S + 2);
    const t0 = Date.now();
    supervisor.kill('SIGTERM');
    await exitOf(supervisor);
    const ms = Date.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(DEADLINE_S * 1000 - 50);
    expect(ms).toBeLessThan(DEADLINE_S * 1000 + 4000);
    expect(processAlive(standIn)).toBe(false);
    expect(existsSync(f.partial)).toBe(false);
    expect(existsSync(f.archive)).toBe(false);
    expect(existsSync(f.claim)).toBe(false);
    expect(readFileSync(f.lastTry, 'utf8')).toMatch(new RegExp(`^was cut short: its stack stopped and it had not finished ${DEADLINE_S} s later`));
    await noTimerLeft();
  });

  test('the JVM killed (kill -9) in the middle of its write: the half archive is removed, never put in place', async () => {
    const f = files();
    const { supervisor, standIn } = await startWriter(f, 3);
    supervisor.kill('SIGUSR1');
    await eventually(() => existsSync(f.partial), 'the write begun', { timeoutMs: 5000 });
    process.kill(standIn, 'SIGKILL');
    await exitOf(supervisor);
    expect(existsSync(f.partial)).toBe(false);
    expect(existsSync(f.archive)).toBe(false);
    expect(existsSync(f.claim)).toBe(false);
    expect(readFileSync(f.lastTry, 'utf8').trim()).toBe('ended (exit 137) without an archive');
  });

  test('stopped (SIGTERM) as it starts: it ends within the deadline, its claim gone and no stand-in left', async () => {
    const f = files();
    const supervisor = spawn(...writerCommand(f, 3), { stdio: 'ignore', detached: true });
    started.push(supervisor);
    // Its traps are set once it has claimed the write (a signal before that ends sh by default, and
    // the stack's process, which sees it die by a signal, removes what it leaves: dynamo-process.ts).
    await eventually(() => readFileSync(f.claim, 'utf8').trim() === String(supervisor.pid), 'the claim taken', { timeoutMs: 5000, intervalMs: 1 });
    const t0 = Date.now();
    supervisor.kill('SIGTERM');
    await exitOf(supervisor);
    expect(Date.now() - t0).toBeLessThan(DEADLINE_S * 1000 + 4000);
    expect(existsSync(f.claim)).toBe(false);
    expect(existsSync(f.archive)).toBe(false);
    await noStandInLeft(f);
  });

  test.runIf(parentDeathSignalCommand() !== undefined)('the supervisor killed outright (kill -9): its JVM goes with it', async () => {
    const f = files();
    const { supervisor, standIn } = await startWriter(f, 3);
    // The stand-in as standIns finds it (the check 'stopped as it starts' relies on).
    expect(standIns(f)).toEqual([standIn]);
    supervisor.kill('SIGKILL');
    await eventually(() => !processAlive(standIn), 'the stand-in gone', { timeoutMs: 5000 });
    await noStandInLeft(f);
  });
});

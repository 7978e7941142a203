/**
 * The data directory lock (infra/local/data-dir-lock.ts): one holder, a clear refusal naming it,
 * takeover of a dead holder's lock at once, and never two winners of a takeover race — interleaved
 * step by step in this process, and raced for real by separate processes.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import {
  DataDirInUse,
  STACK_FILE,
  acquireDataDirLock,
  processAlive,
  readProcessStart,
  removeOwnStackFile,
  runningStack,
  writeStackFile,
  type DataDirLock,
} from '../../infra/local/data-dir-lock.js';

const REPO_ROOT = resolve(import.meta.dirname, '../..');

let dataDir: string;
beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'ferry-lock-'));
});
afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

/** A pid no process has now: a child that ran and exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', '']);
  expect(processAlive(child.pid!)).toBe(false);
  return child.pid!;
}

function refusal(fn: () => unknown): DataDirInUse {
  try {
    fn();
  } catch (e) {
    if (e instanceof DataDirInUse) return e;
    throw e;
  }
  throw new Error('expected DataDirInUse');
}

function generations(): string[] {
  return readdirSync(join(dataDir, 'lock')).sort();
}

describe('one holder per data directory', () => {
  test('a second acquire is refused with a message naming the holder: pid, URL once written, since when', () => {
    const first = acquireDataDirLock(dataDir);

    const starting = refusal(() => acquireDataDirLock(dataDir));
    writeStackFile(first, { url: 'http://127.0.0.1:8780' });
    const running = refusal(() => acquireDataDirLock(dataDir));

    expect(starting.holder.nonce).toBe(first.record.nonce);
    expect(starting.message).toContain('no URL yet (still starting)');
    expect(running.message).toBe(
      `FERRY_DATA_DIR=${dataDir} is in use by a running Ferry stack: pid ${process.pid}, http://127.0.0.1:8780, running since ${first.record.since}. ` +
        `Stop that one first (Ctrl-C in its terminal, or \`kill ${process.pid}\`), or give this one another FERRY_DATA_DIR.`,
    );
    expect(first.held()).toBe(true);
    expect(generations()).toEqual(['gen-1.json']);
  });

  test('a clean release frees the directory; the next holder gets a higher generation', () => {
    const first = acquireDataDirLock(dataDir);
    expect(first.release()).toBe(true);
    expect(first.held()).toBe(false);

    const second = acquireDataDirLock(dataDir);

    expect(second.generation).toBe(3);
    expect(generations()).toEqual(['gen-3.json']);
    expect(first.release()).toBe(false);
    expect(second.held()).toBe(true);
  });

  test('a dead holder (killed -9: its pid is gone) is taken over at once, without waiting for any age', () => {
    acquireDataDirLock(dataDir, { pid: deadPid() });

    const next = acquireDataDirLock(dataDir);

    expect(next.generation).toBe(2);
    expect(next.held()).toBe(true);
    expect(generations()).toEqual(['gen-2.json']);
  });

  test('a reused pid is not the holder: same pid, another process start time', () => {
    acquireDataDirLock(dataDir, { processStart: 'started-before-the-pid-was-reused' });
    expect(readProcessStart(process.pid)).toMatch(/^\d+$/);

    expect(acquireDataDirLock(dataDir).generation).toBe(2);
  });

  test('processAlive refuses what is not a process id (0 and -1 would ask about process groups: "alive")', () => {
    for (const pid of [0, -1, Number(''), Number('x'), 1.5]) expect(() => processAlive(pid)).toThrow(RangeError);
    expect(processAlive(process.pid)).toBe(true);
  });

  test('the stack file is the holder\'s: not removed by a holder that was taken over', () => {
    const old = acquireDataDirLock(dataDir, { processStart: 'gone' });
    writeStackFile(old, { url: 'http://old' });
    const current = acquireDataDirLock(dataDir);
    writeStackFile(current, { url: 'http://current' });

    expect(removeOwnStackFile(old)).toBe(false);
    expect(old.release()).toBe(false);

    expect(JSON.parse(readFileSync(join(dataDir, STACK_FILE), 'utf8'))).toMatchObject({ url: 'http://current', pid: process.pid, lock: current.record.nonce });
    expect(current.held()).toBe(true);
    expect(removeOwnStackFile(current)).toBe(true);
    expect(existsSync(join(dataDir, STACK_FILE))).toBe(false);
  });
});

describe('runningStack (how `ferry audit` can tell a running stack from a leftover stack.json)', () => {
  test('names the holder\'s stack file while it holds the directory; nothing once it is gone or stopped', () => {
    expect(runningStack(dataDir)).toBeUndefined();
    const live = acquireDataDirLock(dataDir);
    writeStackFile(live, { url: 'http://live', dynamodbEndpoint: 'http://127.0.0.1:1' });
    expect(runningStack(dataDir)).toMatchObject({ url: 'http://live', dynamodbEndpoint: 'http://127.0.0.1:1', pid: process.pid, since: live.record.since });
    live.release();
    expect(runningStack(dataDir)).toBeUndefined();

    const crashed = acquireDataDirLock(dataDir, { pid: deadPid() });
    writeStackFile(crashed, { url: 'http://crashed' });

    expect(existsSync(join(dataDir, STACK_FILE))).toBe(true);
    expect(runningStack(dataDir)).toBeUndefined();
  });
});

describe('takeover race', () => {
  test('two starts that both saw the dead holder: the one that creates the next generation first wins, the other is refused', () => {
    acquireDataDirLock(dataDir, { pid: deadPid() });
    let b: DataDirLock | undefined;

    // A has scanned (the holder is dead) and is about to create generation 2; B does all of its acquire then.
    const a = refusal(() => acquireDataDirLock(dataDir, { beforeCreate: () => (b ??= acquireDataDirLock(dataDir)) }));

    expect(b!.generation).toBe(2);
    expect(b!.held()).toBe(true);
    expect(a.holder.nonce).toBe(b!.record.nonce);
    expect(generations()).toEqual(['gen-2.json']);
  });

  test('a start that scanned long ago and recreates a cleaned-up generation loses to the higher one', () => {
    acquireDataDirLock(dataDir, { pid: deadPid() });
    let c: DataDirLock | undefined;

    // S saw generation 1 dead and will create 2; meanwhile A takes 2 and releases (3), C takes 4 and
    // removes 2 and 3, so S's create of 2 succeeds: it must still lose to 4.
    const s = refusal(() =>
      acquireDataDirLock(dataDir, {
        beforeCreate: (generation) => {
          if (c || generation !== 2) return;
          acquireDataDirLock(dataDir).release();
          c = acquireDataDirLock(dataDir);
        },
      }),
    );

    expect(c!.generation).toBe(4);
    expect(s.holder.nonce).toBe(c!.record.nonce);
    expect(c!.held()).toBe(true);
    expect(generations()).toEqual(['gen-4.json']);
  });

  test('separate processes racing for a dead holder\'s lock: exactly one wins', async () => {
    acquireDataDirLock(dataDir, { pid: deadPid() });
    const go = join(dataDir, 'go');
    const script = `
      import { existsSync } from 'node:fs';
      import { acquireDataDirLock } from ${JSON.stringify(join(REPO_ROOT, 'infra/local/data-dir-lock.ts'))};
      while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 5));
      try {
        const lock = acquireDataDirLock(${JSON.stringify(dataDir)});
        console.log(JSON.stringify({ won: lock.generation }));
        // Held until the test lets go (stdin closes), so losers judge a live winner.
        process.stdin.resume();
        process.stdin.on('end', () => process.exit(0));
      } catch (e) {
        console.log(JSON.stringify({ lost: e.name, holder: e.holder?.pid }));
      }`;
    const racers = Array.from({ length: 3 }, () =>
      spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: REPO_ROOT, stdio: ['pipe', 'pipe', 'inherit'] }),
    );
    const lines = racers.map(
      (r) =>
        new Promise<{ pid: number; won?: number; lost?: string; holder?: number }>((done) => {
          let out = '';
          r.stdout!.on('data', (d) => {
            out += String(d);
            if (out.includes('\n')) done({ pid: r.pid!, ...JSON.parse(out) });
          });
        }),
    );
    try {
      writeFileSync(go, '');
      const results = await Promise.all(lines);

      const winners = results.filter((r) => r.won !== undefined);
      expect(winners).toHaveLength(1);
      for (const loser of results.filter((r) => r.won === undefined)) expect(loser).toMatchObject({ lost: 'DataDirInUse', holder: winners[0]!.pid });
      expect(generations()).toEqual([`gen-${winners[0]!.won}.json`]);
    } finally {
      for (const r of racers) r.stdin!.end();
      await Promise.all(racers.map((r) => (r.exitCode !== null ? undefined : new Promise((done) => r.once('exit', done)))));
    }
  }, 30_000);
});

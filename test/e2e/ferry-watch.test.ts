/**
 * `ferry watch` as an operator sees it: the real command (bin/ferry.ts, a child process that finds
 * the stack through FERRY_DATA_DIR's stack.json) in a real terminal (a tmux pane), its screen
 * captured every 100 ms while a real operation runs on a local stack: a host-assisted share
 * migration, one whose copy fails, a live migration and a failover of 1,000 volumes. Each time the
 * bar advances (the screens show at least two different percentages below 100, in order) and ends
 * at 100 % with exit 0, or at the failure's reason with exit 1. `ferry ops` is also run the way
 * an operator runs it against a deployed stack (FERRY_TABLE_*, AWS credentials, no data dir).
 */
import { execFile } from 'node:child_process';
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { main as ferry } from '../../bin/ferry.js';
import { clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { TABLES, tableEnvName, tableName } from '../../functions/core/tables.js';
import { REPO_ROOT } from '../../infra/local/http.js';
import { fillShare, manilaClient, migrationStartBody } from '../support/manila.js';
import { bootServer, novaClient, serverState } from '../support/nova.js';
import { eventually } from '../support/poll.js';
import { seedReplicatedVolumes } from '../support/replicated-volumes.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { exitCodeOf, percentsShown, Tmux, type Screen } from '../support/tmux.js';

const run = promisify(execFile);
const MIB = 1024 * 1024;
const SAVED = ['FERRY_COPY_BYTES_PER_SECOND', 'FERRY_LIVE_MIGRATION_BANDWIDTH', 'FERRY_FAILOVER_BATCH_SIZE', 'FERRY_REPLICATION_INTERVAL_MS'] as const;
const saved = Object.fromEntries(SAVED.map((k) => [k, process.env[k]]));

let stack: TestLocalStack;
const tmux = new Tmux();
const m = manilaClient(() => stack.url);

beforeAll(async () => {
  // Replication only when a test syncs; ten batches of 100 for the failover of 1,000.
  process.env.FERRY_REPLICATION_INTERVAL_MS = String(3_600_000);
  process.env.FERRY_FAILOVER_BATCH_SIZE = '100';
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => {
  tmux.close();
  clearFaults();
  await stack?.stop();
  for (const k of SAVED) (saved[k] === undefined ? delete process.env[k] : (process.env[k] = saved[k]));
});

/** `ferry watch REF` in a tmux pane of its own, as an operator in a second terminal (only FERRY_DATA_DIR set). */
function watchInTerminal(session: string, ref: string): void {
  tmux.run(session, [process.execPath, '--import', 'tsx', 'bin/ferry.ts', 'watch', ref, '--interval', '0.2'], {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8', TERM: 'tmux-256color', FERRY_DATA_DIR: stack.dataDir },
  });
}

const finished = (text: string) => exitCodeOf(text) !== undefined;
const lastScreen = (screens: Screen[]) => screens[screens.length - 1]!.text;

/** The bar advanced: two or more percentages below 100 were shown, never going back, and it ended at 100. */
function expectAdvancedTo100(screens: Screen[]): void {
  const shown = percentsShown(screens);
  expect(shown.filter((p) => p < 100).length, `percentages shown: ${shown.join(', ')}`).toBeGreaterThanOrEqual(2);
  expect([...shown].sort((a, b) => a - b), `percentages shown: ${shown.join(', ')}`).toEqual(shown);
  expect(shown[shown.length - 1]).toBe(100);
}

describe('ferry watch in a real terminal', () => {
  test('a host-assisted share migration: the bar advances to 100 %, phase 1 waits for migration-complete (exit 0); then phase 2 succeeds', async () => {
    // Prepare: ~6 MiB on nfs-a, copied to nfs-c (another driver kind: host-assisted) at 1 MiB/s.
    const { id, path } = await m.availableShare('nfs-a', { name: 'watched' });
    await fillShare(path, { bigBytes: 6 * MIB, files: 40 });
    const typeC = await m.typePinnedTo('nfs-c');
    process.env.FERRY_COPY_BYTES_PER_SECOND = String(MIB);
    // Act
    expect((await m.action(id, migrationStartBody('ferry@nfs-c#pool0', {}, { new_share_type_id: typeC }))).status).toBe(202);
    watchInTerminal('share', `share:${id}`);
    const screens = await tmux.until('share', finished, { timeoutMs: 120_000 });
    // Assess
    const last = lastScreen(screens);
    expect(exitCodeOf(last), last).toBe(0);
    expectAdvancedTo100(screens);
    expect(screens.some((s) => /host-assisted: copying data/.test(s.text) && /\d (B|KiB|MiB)\/s/.test(s.text) && /ETA \d+:\d\d/.test(s.text)), `a screen with the rate and ETA of the copy, among:\n${screens.map((s) => s.text.trim()).join('\n--\n')}`).toBe(true);
    expect(last).toMatch(/phase 1 done \(host-assisted\): waiting for migration-complete/);

    expect((await m.action(id, { migration_complete: null })).status).toBe(202);
    await m.taskStateBecomes(id, ['migration_success']);
    const out: string[] = [];
    expect(await ferry(['watch', `share:${id}`, '--plain'], { out: (l) => out.push(l), err: (l) => out.push(l) })).toBe(0);
    expect(out.join('\n')).toMatch(/succeeded in \d+:\d\d: share-migration share:/);
  }, 180_000);

  test('a share migration whose copy fails: watch ends at the reason (exit 1); ferry ops, the API and a deployed-stack ferry ops say it too', async () => {
    // Prepare
    const { id, path } = await m.availableShare('nfs-a', { name: 'doomed' });
    await fillShare(path, { bigBytes: MIB, files: 5 });
    const typeC = await m.typePinnedTo('nfs-c');
    delete process.env.FERRY_COPY_BYTES_PER_SECOND;
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'fail', message: 'injected: disk on fire' });
    try {
      // Act
      expect((await m.action(id, migrationStartBody('ferry@nfs-c#pool0', {}, { new_share_type_id: typeC }))).status).toBe(202);
      watchInTerminal('doomed', `share:${id}`);
      const screens = await tmux.until('doomed', finished, { timeoutMs: 120_000 });
      // Assess
      const last = lastScreen(screens);
      expect(exitCodeOf(last), last).toBe(1);
      expect(last).toMatch(/failed in \d+:\d\d: Share migration failed: the data copy failed 3 times; last: .*disk on fire/);
    } finally {
      clearFaults();
    }
    // The Manila API's progress details say why (they were {} before).
    const progress = await m.action(id, { migration_get_progress: null }, { version: '2.59' });
    expect(progress.body).toMatchObject({ task_state: 'migration_error', details: { error: expect.stringMatching(/disk on fire/) } });
    // ferry ops (in this process, through the local stack) lists it among the failures, with the reason.
    const out: string[] = [];
    expect(await ferry(['ops'], { out: (l) => out.push(l), err: (l) => out.push(l) })).toBe(1);
    expect(out.join('\n')).toMatch(new RegExp(`share-migration\\s+share:${id}\\n\\s+failed .* ago: Share migration failed: the data copy failed 3 times; last: .*disk on fire`));
    // The same as an operator runs it against a deployed stack: the tables' names, AWS credentials, no data dir.
    const deployed = await run(process.execPath, ['--import', 'tsx', 'bin/ferry.ts', 'ops', '--json'], {
      cwd: REPO_ROOT,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/root',
        ...Object.fromEntries(TABLES.map((t) => [tableEnvName(t.key), tableName(t.key)])),
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'ferry',
        AWS_SECRET_ACCESS_KEY: 'ferry',
        AWS_ENDPOINT_URL_DYNAMODB: process.env.FERRY_DYNAMODB_ENDPOINT!,
        FERRY_DATA_DIR: join(stack.dataDir, 'no-stack-here'),
      },
      timeout: 120_000,
    }).catch((e: { code?: number; stdout?: string; stderr?: string }) => ({ stdout: e.stdout ?? '', stderr: `${e.stderr ?? ''} (exit ${e.code})` }));
    const snap = JSON.parse(deployed.stdout);
    expect(snap.recentFailures.find((v: { ref: string }) => v.ref === `share:${id}`), deployed.stderr).toMatchObject({ kind: 'share-migration', status: 'failed', reason: expect.stringMatching(/disk on fire/) });
  }, 180_000);

  test('a live migration: the bar advances with the disk copied and ends at 100 % (exit 0)', async () => {
    // Prepare: a server whose root disk holds 16 MiB spread over it, copied at 4 MiB/s.
    const nova = novaClient(stack);
    const id = await bootServer(nova, { name: 'watched-vm' });
    const host = (await serverState(id)).instance.host!;
    const disk = join(stack.dataDir, 'compute', host, 'guests', id, 'disk');
    const size = (await stat(disk)).size;
    const f = await open(disk, 'r+');
    try {
      for (let i = 0; i < 16; i++) await f.write(Buffer.alloc(MIB, i + 1), 0, MIB, Math.floor(((size - MIB) * i) / 15));
    } finally {
      await f.close();
    }
    process.env.FERRY_LIVE_MIGRATION_BANDWIDTH = '4';
    try {
      // Act
      const started = await nova('POST', `/servers/${id}/action`, { body: { 'os-migrateLive': { host: null, block_migration: 'auto' } }, version: '2.30' });
      expect(started.status, JSON.stringify(started.body)).toBe(202);
      watchInTerminal('live', `server:${id}`);
      const screens = await tmux.until('live', finished, { timeoutMs: 120_000 });
      // Assess
      const last = lastScreen(screens);
      expect(exitCodeOf(last), last).toBe(0);
      expectAdvancedTo100(screens);
      expect(last).toMatch(/succeeded in \d+:\d\d: live-migration server:/);
      expect((await serverState(id)).instance.host).not.toBe(host);
    } finally {
      delete process.env.FERRY_LIVE_MIGRATION_BANDWIDTH;
    }
  }, 180_000);

  test('a failover of 1,000 volumes: volumes done of 1,000 advance to 100 % (exit 0)', async () => {
    // Prepare: 1,000 replicated volumes; the driver holds the fifth of ten batches until the test lets it go.
    await seedReplicatedVolumes(1000);
    injectFault({ kind: 'volume', backend: 'ferry@lvm-r', method: 'failoverHost', mode: 'hang', times: 1, skip: 4 });
    let before: Screen[] = [];
    try {
      // Act
      const res = await fetch(`${stack.url}/volume/v3/os-services/failover_host`, {
        method: 'PUT',
        headers: { 'X-Auth-Token': 'admin:admin', 'OpenStack-API-Version': 'volume 3.70', 'Content-Type': 'application/json' },
        body: JSON.stringify({ host: 'ferry@lvm-r', backend_id: 'site-b' }),
      });
      expect(res.status, await res.text()).toBe(202);
      watchInTerminal('failover', 'backend:ferry@lvm-r');
      await eventually(async () => (faultCalls().some((c) => c.method === 'failoverHost' && c.hanging) ? true : undefined), 'a batch held in the driver');
      // The watch shows the batches done so far before the held one goes on.
      before = await tmux.until('failover', (t) => /\]\s+([1-9]\d?) %\s+\d+ of 1000 volumes/.test(t), { timeoutMs: 60_000 });
    } finally {
      clearFaults();
    }
    const screens = [...before, ...(await tmux.until('failover', finished, { timeoutMs: 120_000 }))];
    // Assess: a partial count, then all 1,000, in order.
    const last = lastScreen(screens);
    expect(exitCodeOf(last), last).toBe(0);
    expect(last).toMatch(/1000 of 1000 volumes/);
    expect(last).toMatch(/succeeded in \d+:\d\d: failover replication:/);
    const shown = percentsShown(screens);
    expect(shown.some((p) => p > 0 && p < 100), `percentages shown: ${shown.join(', ')}`).toBe(true);
    expect([...shown].sort((a, b) => a - b)).toEqual(shown);
    expect(shown[shown.length - 1]).toBe(100);
  }, 240_000);
});

/**
 * The real manila CLI (python3-manilaclient 4.1.1, bypass-url/token mode, reference §4.1) drives
 * share migration on the embedded local stack: migration-start, migration-get-progress (which
 * prints every key of the body) and migration-complete to migration_success for the
 * driver-assisted and the host-assisted approach (the copy worker as a child process), with the
 * share's data byte-identical at the destination; migration-cancel during the copy (Ferry ends
 * in migration_cancelled, upstream in migration_success: §1.10); reset-task-state with a state
 * and with none; and how the CLI prints the server's errors. Every scenario ends with a clean audit.
 * Waits go over HTTP (each CLI call is a Python start, ~1 CPU s); every command whose output or
 * exit is checked, final states included, runs through the CLI.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { getShare } from '../../functions/shares/repo.js';
import { manilaCli, parseListTable, parsePropertyTable, type CliResult } from '../support/cli.js';
import { fillShare, manilaClient, shareDigest, useFastMigrationEnv } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and rediscovers versions. */
const SCENARIO_TIMEOUT_MS = 300_000;
const TERMINAL = ['migration_success', 'migration_error', 'migration_cancelled'];

let stack: TestLocalStack;
let restoreEnv: (() => void) | undefined;
/** The same API over HTTP, as the admin: what the tests wait through (a fetch instead of a Python start per poll). */
const api = manilaClient(() => stack.url);

const manilaAs = (token: string, ...args: string[]): Promise<CliResult> => manilaCli(`${stack.url}/share/v2`, token, args);

/** `manila <args>` as the admin; fails with the CLI's output unless it exits 0. */
async function manila(...args: string[]): Promise<string> {
  const r = await manilaAs('admin:admin', ...args);
  if (r.code !== 0) throw new Error(`manila ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}


async function show(id: string): Promise<Record<string, string>> {
  return parsePropertyTable(await manila('show', id));
}

async function exportPath(id: string): Promise<string> {
  const rows = parseListTable(await manila('share-export-location-list', id));
  expect(rows).toHaveLength(1);
  return rows[0]!.Path!;
}

/**
 * Waits over HTTP (a fetch, not a Python start) until the share's task_state is `wanted` (fails
 * fast on another terminal state), then shows it once through `manila show`: what the test checks.
 */
async function showTaskStateBecomes(id: string, wanted: string, timeoutMs = 120_000): Promise<Record<string, string>> {
  await api.taskStateBecomes(id, [wanted], timeoutMs);
  return show(id);
}

interface Progress {
  table: Record<string, string>;
  out: string;
}

/** The body of migration_get_progress over HTTP (2.72: details too). */
interface ApiProgress {
  task_state: string;
  total_progress: number;
  details: Record<string, unknown>;
}

/**
 * Waits over HTTP until `ready` accepts the share's migration_get_progress body (the waiting the
 * CLI's output is not checked for), then runs `manila migration-get-progress` until `done`
 * accepts the table it prints (the first call, unless the state moved on); returns that table
 * with every one the CLI printed.
 */
async function progressUntil(id: string, ready: (p: ApiProgress) => boolean, done: (p: Record<string, string>) => boolean, timeoutMs = 120_000): Promise<{ last: Progress; seen: Progress[] }> {
  await eventually(async (note) => {
    const res = await api.action(id, { migration_get_progress: null });
    if (res.status !== 200) throw new Error(`migration_get_progress of share ${id}: ${res.status} ${JSON.stringify(res.body)}`);
    const p = note(res.body as ApiProgress);
    if (ready(p)) return true;
    if (TERMINAL.includes(p.task_state)) throw new Error(`share ${id} ended in ${p.task_state}: ${(await getShare(id))?.migration?.error ?? ''}`);
    return undefined;
  }, `migration_get_progress of share ${id} to be ready for the CLI`, { timeoutMs, intervalMs: 100 });
  const seen: Progress[] = [];
  return eventually(async (note) => {
    const out = note(await manila('migration-get-progress', id));
    const table = parsePropertyTable(out);
    seen.push({ table, out });
    if (done(table)) return { last: { table, out }, seen };
    if (TERMINAL.includes(table.task_state!)) throw new Error(`share ${id} ended in ${table.task_state}: ${(await getShare(id))?.migration?.error ?? ''}\n${out}`);
    return undefined;
  }, `migration-get-progress of share ${id} to satisfy the test`, { timeoutMs, intervalMs: 100 });
}

/** An available share on `backend` created by `manila create` (as `token`), with its id and export path. */
async function createShare(backend: string, opts: { token?: string; name?: string } = {}): Promise<{ id: string; path: string }> {
  const r = await manilaAs(opts.token ?? 'admin:admin', 'create', 'NFS', '1', '--share-type', `on-${backend}`, '--name', opts.name ?? `mig-${backend}`);
  expect(r.code, r.stderr).toBe(0);
  const created = parsePropertyTable(r.stdout);
  expect(created.status).toBe('creating');
  const id = created.id!;
  // The wait is over HTTP; the share as the CLI shows it is checked once it is available.
  const { status } = await api.statusBecomes(id, ['available', 'error'], 60_000);
  expect(status, `share ${id}`).toBe('available');
  const s = await show(id);
  expect(s).toMatchObject({ status: 'available', host: `ferry@${backend}#pool0`, share_type_name: `on-${backend}`, task_state: 'None' });
  return { id, path: await exportPath(id) };
}

/** The repr of a flat Python dict, as `cliutils.print_dict` prints a dict value: `{'k': 'v', 'n': 1}`. */
function pyDict(repr: string): Record<string, string | number | boolean | null> {
  const out: Record<string, string | number | boolean | null> = {};
  const body = repr.trim().replace(/^\{|\}$/g, '');
  for (const m of body.matchAll(/'([^']*)':\s*('(?:[^'\\]|\\.)*'|[^,]+)/g)) {
    const v = m[2]!.trim();
    out[m[1]!] = v.startsWith("'") ? v.slice(1, -1) : v === 'None' ? null : v === 'True' ? true : v === 'False' ? false : Number(v);
  }
  return out;
}

async function cleanAudit(): Promise<void> {
  expect((await runAudit()).findings).toEqual([]);
}

beforeAll(async () => {
  restoreEnv = useFastMigrationEnv();
  stack = await useLocalStack();
  // Share types pinned to one backend each, made with the CLI.
  for (const backend of ['nfs-a', 'nfs-b', 'nfs-c']) {
    const out = await manila('type-create', `on-${backend}`, 'False', '--extra-specs', `share_backend_name=${backend}`);
    expect(parsePropertyTable(out), out).toMatchObject({ Name: `on-${backend}`, Visibility: 'public', optional_extra_specs: `share_backend_name : ${backend}` });
  }
  const types = parseListTable(await manila('type-list'));
  expect(types.map((t) => t.Name)).toEqual(expect.arrayContaining(['on-nfs-a', 'on-nfs-b', 'on-nfs-c']));
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  restoreEnv?.();
});

describe('manila CLI share migration', () => {
  test(
    'driver-assisted: migration-start -> get-progress until migration_driver_phase1_done -> migration-complete -> migration_success; data byte-identical',
    async () => {
      const { id, path } = await createShare('nfs-a', { name: 'mig-driver' });
      await fillShare(path);
      const before = shareDigest(path);

      // Act
      const started = await manilaAs(
        'admin:admin',
        ...['migration-start', id, 'ferry@nfs-b#pool0', '--writable', 'True', '--preserve-metadata', 'True', '--preserve-snapshots', 'False'],
        ...['--nondisruptive', 'False', '--new-share-type', 'on-nfs-b'],
      );
      // Assess
      expect(started, started.stderr).toMatchObject({ code: 0, stdout: '' });
      expect((await show(id)).status).toBe('migrating');
      const { last, seen } = await progressUntil(id, (p) => p.task_state === 'migration_driver_phase1_done', (p) => p.task_state === 'migration_driver_phase1_done');
      // The CLI prints every key of the body (2.72 > 2.59, so details too). As upstream, progress is
      // computed first and the task_state read after: the poll that sees phase1_done may carry the
      // driver's last details (its copy at 100%) or, once phase1_done was read, none.
      expect(last.table).toMatchObject({ total_progress: '100', task_state: 'migration_driver_phase1_done' });
      if (last.table.details !== '{}') expect(last.table.details).toContain("'phase': 'phase1-done'");
      console.log(`manila migration-get-progress (driver-assisted, phase 1 done):\n${last.out}`);
      for (const p of seen) expect(Object.keys(p.table).sort()).toEqual(['details', 'task_state', 'total_progress']);
      expect((await getShare(id))!.migration!.approach).toBe('driver');

      const completed = await manilaAs('admin:admin', 'migration-complete', id);
      expect(completed, completed.stderr).toMatchObject({ code: 0, stdout: '' });
      const done = await showTaskStateBecomes(id, 'migration_success');
      expect(done).toMatchObject({ status: 'available', host: 'ferry@nfs-b#pool0', share_type_name: 'on-nfs-b' });
      const after = await manila('migration-get-progress', id);
      expect(parsePropertyTable(after)).toEqual({ total_progress: '100', task_state: 'migration_success', details: '{}' });

      const newPath = await exportPath(id);
      expect(newPath).not.toBe(path);
      expect(newPath).toContain('/nfs-b/');
      expect(existsSync(path)).toBe(false);
      expect(shareDigest(newPath)).toEqual(before);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );

  test(
    'host-assisted (--force-host-assisted-migration True): copy worker child, get-progress until data_copying_completed -> complete -> success; byte-identical',
    async () => {
      const { id, path } = await createShare('nfs-a', { name: 'mig-host' });
      await fillShare(path, { bigBytes: 6 * 1024 * 1024 });
      const before = shareDigest(path);
      // Slow enough (6 s) that the CLI, started once the copy is under way, still sees it running on
      // a loaded machine (the worker inherits the stack's environment).
      process.env.FERRY_COPY_BYTES_PER_SECOND = String(1024 * 1024);
      try {
        // Act
        const started = await manilaAs(
          'admin:admin',
          ...['migration-start', id, 'ferry@nfs-c#pool0', '--force-host-assisted-migration', 'True', '--writable', 'False', '--preserve-metadata', 'False'],
          ...['--preserve-snapshots', 'False', '--nondisruptive', 'False', '--new-share-type', 'on-nfs-c'],
        );
        // Assess
        expect(started, started.stderr).toMatchObject({ code: 0, stdout: '' });
        // Over HTTP until a file is being copied, then the CLI until it prints that (a sample with a
        // current file), then over HTTP again until the copy is done and the CLI prints that.
        const inFile = (p: ApiProgress) => p.task_state === 'data_copying_in_progress' && 'current_file_path' in p.details && p.total_progress < 20;
        const isCompleted = (p: { task_state?: string }) => p.task_state === 'data_copying_completed';
        const during = await progressUntil(id, inFile, (p) => isCompleted(p) || (p.task_state === 'data_copying_in_progress' && 'current_file_path' in pyDict(p.details!)));
        const { last, seen: after } = await progressUntil(id, isCompleted, isCompleted);
        const seen = [...during.seen, ...after];
        // As above: the poll that first sees data_copying_completed may carry the copy's last details.
        expect(last.table).toMatchObject({ total_progress: '100', task_state: 'data_copying_completed' });
        if (last.table.details !== '{}') expect(last.table.details).toContain('bytes_total');
        const copying = seen.filter((p) => p.table.task_state === 'data_copying_in_progress');
        expect(copying.length, seen.map((p) => p.table.task_state).join(' ')).toBeGreaterThan(0);
        // A sample taken while a file was being copied (between files, or once the last byte is in, there is no current file).
        const withFile = copying.filter((p) => 'current_file_path' in pyDict(p.table.details!));
        expect(withFile.length, copying.map((p) => p.table.details).join(' | ')).toBeGreaterThan(0);
        const mid = withFile[withFile.length - 1]!;
        console.log(`manila migration-get-progress (host-assisted, copying):\n${mid.out}`);
        const details = pyDict(mid.table.details!);
        expect(details).toMatchObject({ bytes_total: expect.any(Number), bytes_copied: expect.any(Number), files_total: expect.any(Number), current_file_path: expect.stringMatching(/^\/.*\/share-[0-9a-f-]{36}\//) });
        expect(details.bytes_total).toBeGreaterThanOrEqual(6 * 1024 * 1024);
        expect(details.bytes_copied as number).toBeLessThan(details.bytes_total as number);
        expect(Number(mid.table.total_progress)).toBeGreaterThanOrEqual(0);
        expect(Number(mid.table.total_progress)).toBeLessThanOrEqual(100);
        const progressSeen = seen.map((p) => Number(p.table.total_progress));
        expect(progressSeen).toEqual([...progressSeen].sort((a, b) => a - b)); // never goes back
        const m = (await getShare(id))!.migration!;
        expect(m).toMatchObject({ approach: 'host' });
        expect(m.copyOperationId).toBeTruthy();
        expect((await show(id)).status).toBe('migrating');
      } finally {
        delete process.env.FERRY_COPY_BYTES_PER_SECOND;
      }

      const completed = await manilaAs('admin:admin', 'migration-complete', id);
      expect(completed, completed.stderr).toMatchObject({ code: 0, stdout: '' });
      const done = await showTaskStateBecomes(id, 'migration_success');
      expect(done).toMatchObject({ status: 'available', host: 'ferry@nfs-c#pool0', share_type_name: 'on-nfs-c' });
      const newPath = await exportPath(id);
      expect(newPath).not.toBe(path);
      expect(newPath).toContain('/nfs-c/');
      expect(existsSync(path)).toBe(false);
      expect(shareDigest(newPath)).toEqual(before);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );

  test(
    'migration-cancel during the copy -> migration_cancelled (upstream: migration_success): share on its source, data intact, destination gone',
    async () => {
      const { id, path } = await createShare('nfs-a', { name: 'mig-cancel' });
      await fillShare(path, { bigBytes: 16 * 1024 * 1024 });
      const before = shareDigest(path);
      process.env.FERRY_COPY_BYTES_PER_SECOND = String(2 * 1024 * 1024);
      try {
        const started = await manilaAs(
          'admin:admin',
          ...['migration-start', id, 'ferry@nfs-c#pool0', '--force-host-assisted-migration', 'True', '--writable', 'False', '--preserve-metadata', 'False'],
          ...['--preserve-snapshots', 'False', '--nondisruptive', 'False', '--new-share-type', 'on-nfs-c'],
        );
        expect(started, started.stderr).toMatchObject({ code: 0, stdout: '' });
        const copying = (p: ApiProgress) => p.task_state === 'data_copying_in_progress' && p.total_progress > 0 && p.total_progress < 30;
        const { last } = await progressUntil(id, copying, (p) => p.task_state === 'data_copying_in_progress' && Number(p.total_progress) > 0);
        expect(Number(last.table.total_progress)).toBeLessThan(100);
        expect(pyDict(last.table.details!)).toMatchObject({ bytes_total: expect.any(Number), bytes_copied: expect.any(Number) });
        console.log(`manila migration-get-progress (host-assisted, before cancel):\n${last.out}`);
        const destPath = (await getShare(id))!.migration!.destination!.exportLocations[0]!;
        expect(existsSync(destPath)).toBe(true);

        // Act
        const cancelled = await manilaAs('admin:admin', 'migration-cancel', id);

        // Assess
        expect(cancelled, cancelled.stderr).toMatchObject({ code: 0, stdout: '' });
        const s = await showTaskStateBecomes(id, 'migration_cancelled');
        expect(s).toMatchObject({ status: 'available', host: 'ferry@nfs-a#pool0', share_type_name: 'on-nfs-a' });
        expect(await exportPath(id)).toBe(path);
        expect(existsSync(destPath)).toBe(false);
        expect(shareDigest(path)).toEqual(before);
        const progress = parsePropertyTable(await manila('migration-get-progress', id));
        expect(progress).toEqual({ total_progress: '100', task_state: 'migration_cancelled', details: '{}' });
        // A second cancel, or a complete, of a cancelled migration is refused with upstream's message.
        const again = await manilaAs('admin:admin', 'migration-complete', id);
        expect(again.code).not.toBe(0);
        expect(again.stderr).toMatch(new RegExp(`^ERROR: Invalid share: Migration of share ${id} was already cancelled\\. \\(HTTP 400\\)`, 'm'));
      } finally {
        delete process.env.FERRY_COPY_BYTES_PER_SECOND;
      }
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );

  test(
    'reset-task-state: --task-state migration_error, then no state (JSON null); show reflects each; an invalid state is refused',
    async () => {
      const { id } = await createShare('nfs-b', { name: 'mig-reset' });

      const set = await manilaAs('admin:admin', 'reset-task-state', id, '--task-state', 'migration_error');
      expect(set, set.stderr).toMatchObject({ code: 0, stdout: '' });
      expect(await show(id)).toMatchObject({ task_state: 'migration_error', status: 'available' });

      const cleared = await manilaAs('admin:admin', 'reset-task-state', id);
      expect(cleared, cleared.stderr).toMatchObject({ code: 0, stdout: '' });
      expect(await show(id)).toMatchObject({ task_state: 'None', status: 'available' });

      // The CLI passes any string through; the server refuses it (400) and the CLI prints that.
      for (const bad of ['bogus', 'migration_driver_starting']) {
        const invalid = await manilaAs('admin:admin', 'reset-task-state', id, '--task-state', bad);
        expect(invalid.code).not.toBe(0);
        expect(invalid.stderr).toMatch(/^ERROR: Invalid state\. Valid states: .*migration_error.* \(HTTP 400\)/m);
      }
      expect((await show(id)).task_state).toBe('None');
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );

  test(
    'errors: non-admin migration-start -> ERROR ... (HTTP 403); migration-complete / get-progress with no migration -> upstream 400 message',
    async () => {
      // demo's own share, so the CLI's lookup finds it and the action itself is what is refused.
      const { id, path } = await createShare('nfs-a', { token: 'demo:demo', name: 'demo-share' });
      const denied = await manilaAs(
        'demo:demo',
        ...['migration-start', id, 'ferry@nfs-b#pool0', '--writable', 'False', '--preserve-metadata', 'False', '--preserve-snapshots', 'False', '--nondisruptive', 'False'],
      );
      expect(denied.code).not.toBe(0);
      expect(denied.stderr).toMatch(/^ERROR: Policy doesn't allow share:migration_start to be performed\. \(HTTP 403\)/m);
      expect(await show(id)).toMatchObject({ status: 'available', task_state: 'None', host: 'ferry@nfs-a#pool0' });
      const resetDenied = await manilaAs('demo:demo', 'reset-task-state', id, '--task-state', 'migration_error');
      expect(resetDenied.code).not.toBe(0);
      expect(resetDenied.stderr).toMatch(/^ERROR: Policy doesn't allow share:reset_task_state to be performed\. \(HTTP 403\)/m);
      const progressDenied = await manilaAs('demo:demo', 'migration-get-progress', id);
      expect(progressDenied.stderr).toMatch(/^ERROR: Policy doesn't allow share:migration_get_progress to be performed\. \(HTTP 403\)/m);
      expect((await show(id)).task_state).toBe('None');

      const complete = await manilaAs('admin:admin', 'migration-complete', id);
      expect(complete.code).not.toBe(0);
      expect(complete.stderr).toMatch(new RegExp(`^ERROR: Invalid share: There is no migration being performed for share ${id} at this moment\\. \\(HTTP 400\\)`, 'm'));
      console.log(`non-admin migration-start: ${denied.stderr}migration-complete with no migration: ${complete.stderr}`);
      const progress = await manilaAs('admin:admin', 'migration-get-progress', id);
      expect(progress.code).not.toBe(0);
      expect(progress.stderr).toMatch(new RegExp(`^ERROR: Invalid share: There is no migration being performed for share ${id} at this moment\\. \\(HTTP 400\\)`, 'm'));
      const cancel = await manilaAs('admin:admin', 'migration-cancel', id);
      expect(cancel.code).not.toBe(0);
      expect(cancel.stderr).toMatch(/^ERROR: Invalid share: .+ \(HTTP 400\)/m);
      // An unknown destination is the server's 404.
      const nowhere = await manilaAs(
        'admin:admin',
        ...['migration-start', id, 'ferry@nope#pool0', '--writable', 'False', '--preserve-metadata', 'False', '--preserve-snapshots', 'False', '--nondisruptive', 'False'],
      );
      expect(nowhere.code).not.toBe(0);
      expect(nowhere.stderr).toMatch(/^ERROR: ServiceNotFound: Service ferry@nope could not be found\. \(HTTP 404\)/m);
      expect(existsSync(path)).toBe(true);
      expect(await show(id)).toMatchObject({ status: 'available', task_state: 'None' });
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});

/**
 * Share migration end to end on the embedded local stack, over HTTP: driver-assisted between two
 * local-a backends (migration_start, the bounded migration_continue loop, phase1_done,
 * migration_complete) and host-assisted to a local-b backend (read-only source, data node access,
 * the copy worker as a real child process through the local ecs:runTask.sync integration); the
 * data is byte-identical (with modes, times, symlinks and hard links) at the destination, the
 * source is gone, the share's rules are on the destination. Cancel during the copy ends in
 * migration_cancelled with the share on its source (upstream ends in migration_success: §1.10).
 * Every scenario ends with a clean audit.
 */
import { existsSync, statSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clearFaults } from '../../functions/core/faults.js';
import { getShare } from '../../functions/shares/repo.js';
import { fillShare, manilaClient, migrationStartBody, shareDigest, useFastMigrationEnv } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
const m = manilaClient(() => stack.url);
let restoreEnv: (() => void) | undefined;

beforeAll(async () => {
  restoreEnv = useFastMigrationEnv();
  stack = await useLocalStack();
}, 60_000);
afterAll(async () => {
  await stack?.stop();
  restoreEnv?.();
});
afterEach(async () => {
  clearFaults();
  delete process.env.FERRY_COPY_BYTES_PER_SECOND;
  expect((await runAudit()).findings).toEqual([]);
});

describe('driver-assisted (local-a to local-a)', () => {
  test('start -> migration_continue loop -> phase1_done -> complete -> migration_success; data, rules and type moved', async () => {
    const { id, path } = await m.availableShare('nfs-a');
    await fillShare(path);
    const before = shareDigest(path);
    const rule = await m.action(id, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' } });
    expect(rule.status).toBe(200);
    const typeB = await m.typePinnedTo('nfs-b');

    const started = await m.action(id, migrationStartBody('ferry@nfs-b#pool0', { writable: true, preserve_metadata: true }, { new_share_type_id: typeB }));
    expect(started.status).toBe(202);
    expect((await m.share(id)).status).toBe('migrating');

    // Writable while driver-assisted phase 1 runs: a write now is carried over by the final sync.
    const phase1 = await m.taskStateBecomes(id, ['migration_driver_phase1_done']);
    expect(phase1.status).toBe('migrating');
    await writeFile(join(path, 'late.txt'), 'written during phase 1\n');
    const progress = await m.action(id, { migration_get_progress: null }, { version: '2.59' });
    expect(progress.body).toEqual({ total_progress: 100, task_state: 'migration_driver_phase1_done', details: {} });
    const instances = await m.api('GET', `/shares/${id}/instances`);
    expect(instances.body.share_instances.map((i: any) => i.status).sort()).toEqual(['migrating', 'migrating_to']);

    expect((await m.action(id, { migration_complete: null })).status).toBe(202);
    const done = await m.taskStateBecomes(id, ['migration_success']);
    expect(done).toMatchObject({ status: 'available', host: 'ferry@nfs-b#pool0', share_type: typeB, share_type_name: 'on-nfs-b' });
    const newPath = (await m.api('GET', `/shares/${id}/export_locations`)).body.export_locations[0].path;
    expect(newPath).not.toBe(path);
    expect(newPath).toContain('/nfs-b/');
    expect(existsSync(path)).toBe(false);
    expect(shareDigest(newPath)).toEqual({ ...before, 'late.txt': shareDigest(newPath)['late.txt'] });
    expect(await readFile(join(newPath, 'late.txt'), 'utf8')).toBe('written during phase 1\n');
    const record = await getShare(id);
    expect(record?.migration).toBeNull();
    expect((await m.api('GET', `/shares/${id}/instances`)).body.share_instances).toHaveLength(1);
    // The rule is on the destination backend now.
    const rulesFile = JSON.parse(await readFile(newPath + '.access.json', 'utf8'));
    expect(rulesFile).toEqual([expect.objectContaining({ accessTo: '10.0.0.0/24', accessLevel: 'rw' })]);
  }, 180_000);

  test('cancel after phase 1 -> migration_cancelled: destination removed, share untouched on its source', async () => {
    const { id, path } = await m.availableShare('nfs-a');
    await fillShare(path);
    const before = shareDigest(path);
    const typeB = await m.typePinnedTo('nfs-b');
    expect((await m.action(id, migrationStartBody('ferry@nfs-b#pool0', {}, { new_share_type_id: typeB }))).status).toBe(202);
    await m.taskStateBecomes(id, ['migration_driver_phase1_done']);
    const dest = (await getShare(id))!.migration!.destination!;
    const destPath = join(stack.dataDir, 'shares', 'nfs-b', `share-${dest.id}`);
    expect(shareDigest(destPath)).toEqual(before);

    expect((await m.action(id, { migration_cancel: null })).status).toBe(202);
    const s = await m.taskStateBecomes(id, ['migration_cancelled']);
    expect(s).toMatchObject({ status: 'available', host: 'ferry@nfs-a#pool0' });
    expect(existsSync(destPath)).toBe(false);
    expect(existsSync(destPath + '.migration.json')).toBe(false);
    expect(shareDigest(path)).toEqual(before);
  }, 180_000);
});

describe('host-assisted (to local-b, the copy worker as a child process)', () => {
  test('forced: read-only source and data node access while copying; data_copying_completed; complete -> success', async () => {
    const { id, path } = await m.availableShare('nfs-a');
    await fillShare(path, { bigBytes: 6 * 1024 * 1024 });
    const before = shareDigest(path);
    await m.action(id, { allow_access: { access_type: 'ip', access_to: '10.1.0.0/16', access_level: 'rw' } });
    // Slow the worker down (it inherits the stack's environment) so the copy can be watched.
    process.env.FERRY_COPY_BYTES_PER_SECOND = String(4 * 1024 * 1024);

    const typeC = await m.typePinnedTo('nfs-c');
    expect((await m.action(id, migrationStartBody('ferry@nfs-c#pool0', { force_host_assisted_migration: true }, { new_share_type_id: typeC }))).status).toBe(202);
    await m.taskStateBecomes(id, ['data_copying_in_progress']);
    const rec = (await getShare(id))!;
    const m1 = rec.migration!;
    expect(m1).toMatchObject({ approach: 'host', readOnlyCast: true, dataNodeAccess: true });
    const srcRules = JSON.parse(await readFile(path + '.access.json', 'utf8'));
    expect(srcRules.map((r: any) => `${r.accessTo}:${r.accessLevel}`).sort()).toEqual(['10.1.0.0/16:ro', '127.0.0.1:ro']);
    expect(statSync(path).mode & 0o777).toBe(0o555);
    const destPath = m1.destination!.exportLocations[0]!;
    expect(JSON.parse(await readFile(destPath + '.access.json', 'utf8'))).toEqual([expect.objectContaining({ accessTo: '127.0.0.1', accessLevel: 'rw' })]);
    const progress = await eventually(async () => {
      const p = await m.action(id, { migration_get_progress: null }, { version: '2.59' });
      return p.body.task_state === 'data_copying_in_progress' && p.body.total_progress > 0 ? p.body : undefined;
    }, 'copy progress');
    expect(progress.details).toHaveProperty('bytes_total');

    const phase1 = await m.taskStateBecomes(id, ['data_copying_completed'], 120_000);
    expect(phase1.status).toBe('migrating');
    expect(JSON.parse(await readFile(destPath + '.access.json', 'utf8'))).toEqual([]);
    // Still read-only until phase 2: nothing written now could be lost.
    expect(statSync(path).mode & 0o777).toBe(0o555);

    expect((await m.action(id, { migration_complete: null })).status).toBe(202);
    const done = await m.taskStateBecomes(id, ['migration_success']);
    expect(done).toMatchObject({ status: 'available', host: 'ferry@nfs-c#pool0' });
    expect(existsSync(path)).toBe(false);
    expect(shareDigest(destPath)).toEqual(before);
    const rules = JSON.parse(await readFile(destPath + '.access.json', 'utf8'));
    expect(rules.map((r: any) => `${r.accessTo}:${r.accessLevel}`)).toEqual(['10.1.0.0/16:rw']);
  }, 180_000);

  test('cancel during the copy -> migration_cancelled (not upstream migration_success): source writable and intact, destination gone', async () => {
    const { id, path } = await m.availableShare('nfs-a');
    await fillShare(path, { bigBytes: 16 * 1024 * 1024 });
    const before = shareDigest(path);
    process.env.FERRY_COPY_BYTES_PER_SECOND = String(2 * 1024 * 1024);
    const typeC = await m.typePinnedTo('nfs-c');
    expect((await m.action(id, migrationStartBody('ferry@nfs-c#pool0', { force_host_assisted_migration: true }, { new_share_type_id: typeC }))).status).toBe(202);
    await m.taskStateBecomes(id, ['data_copying_in_progress']);
    const destPath = (await getShare(id))!.migration!.destination!.exportLocations[0]!;
    await eventually(async () => ((await m.action(id, { migration_get_progress: null })).body.total_progress > 0 ? true : undefined), 'some bytes copied');

    expect((await m.action(id, { migration_cancel: null })).status).toBe(202);
    const s = await m.taskStateBecomes(id, ['migration_cancelled']);
    expect(s).toMatchObject({ status: 'available', host: 'ferry@nfs-a#pool0' });
    expect(existsSync(destPath)).toBe(false);
    expect(statSync(path).mode & 0o777).toBe(0o755);
    expect(JSON.parse(await readFile(path + '.access.json', 'utf8'))).toEqual([]);
    expect(shareDigest(path)).toEqual(before);
  }, 180_000);
});

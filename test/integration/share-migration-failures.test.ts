/**
 * Share migration failures on the embedded local stack: for each failure point of reference
 * manila-cinder.md §1.9 a fault is injected (functions/core/faults.ts: share driver methods,
 * and the copy worker's copy_file through FERRY_FAULTS), and the cleanup is checked exactly:
 * task_state, the share available on its source host with one instance, no destination backend
 * share (nor its .migration.json), the source's backend rules exactly the share's own (no data
 * node rule, no read-only cast) and its directory writable, the data intact, the destination
 * pool's capacity given back, no copy record, and a clean audit.
 *
 * DriverError faults are retried by the ASL (MaxAttempts 3: four calls in all), so `times` is
 * four where the cleanup then calls the same method and must succeed; every test checks that the
 * fault was used up (the machine really made that many calls) and no more.
 *
 * Crashes: the copy worker killed with SIGKILL mid-copy, the whole stack restarted in this
 * process mid-copy, and the whole stack process killed with SIGKILL mid-copy (a child process
 * here) then started again on the same data directory. Stack and helpers: support/share-migration-failures.ts.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { getCopyOperation } from '../../functions/copy/progress.js';
import { clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { copyOperationIdOf } from '../../functions/migration/host-copy.js';
import { allocatedOnSharePool, getShare } from '../../functions/shares/repo.js';
import { freePort } from '../../infra/local/ports.js';
import { REPO_ROOT } from '../../infra/local/http.js';
import { fillShare, manilaClient, migrationStartBody, shareDigest } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { fullRunRow } from '../support/failure-rows.js';
import { SRC, DRIVER_DEST, HOST_DEST, OWN_RULES, useShareMigrationFailureStack } from '../support/share-migration-failures.js';

const { m, stack: currentStack, rulesOf, modeOf, scenario, start, fault, expectCleanOnSource, taskStateTurns, childrenOf, processGone, copyUnderWay } = useShareMigrationFailureStack();

// ---- phase 1, driver-assisted ------------------------------------------------------------------

describe('phase 1, driver-assisted (nfs-a to nfs-b)', () => {
  test('migration_start fails, all flags False -> silent fallback to host-assisted, data_copying_completed; cancel cleans up', async () => {
    const sc = await scenario(DRIVER_DEST);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-a', method: 'migrationStart', mode: 'fail', times: 4 });
    await start(sc);
    const phase1 = await m.taskStateBecomes(sc.id, ['data_copying_completed']);
    expect(phase1).toMatchObject({ status: 'migrating', host: SRC });
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    const mig = (await getShare(sc.id))!.migration!;
    expect(mig.approach).toBe('host');
    // The host-assisted copy landed on the same destination backend, complete.
    expect(shareDigest(mig.destination!.exportLocations[0]!)).toEqual(sc.before);
    expect(existsSync(mig.destination!.exportLocations[0]! + '.migration.json')).toBe(false);

    expect((await m.action(sc.id, { migration_cancel: null })).status).toBe(202);
    await m.taskStateBecomes(sc.id, ['migration_cancelled']);
    await expectCleanOnSource(sc, 'migration_cancelled');
  }, 120_000);

  test('migration_start fails with writable True -> migration_error, nothing left', async () => {
    const sc = await scenario(DRIVER_DEST);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-a', method: 'migrationStart', mode: 'fail', times: 4 });
    await start(sc, { writable: true });
    await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    expect((await getShare(sc.id))!.errorReason).toMatch(/host-assisted migration cannot honour/);
    await expectCleanOnSource(sc, 'migration_error');
  }, 120_000);

  test('migration_continue fails -> migration_error: migration_cancel removed the driver destination', async () => {
    const sc = await scenario(DRIVER_DEST);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-a', method: 'migrationContinue', mode: 'fail', times: 4 });
    await start(sc);
    await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    // The driver had started (its destination and state file existed): the cleanup cancelled it.
    const cancels = faultCalls().filter((c) => c.method === 'migrationCancel' && c.backend === 'ferry@nfs-a');
    expect(cancels.map((c) => c.outcome)).toEqual(['ok']);
    await expectCleanOnSource(sc, 'migration_error');
  }, 120_000);
});

// ---- phase 1, host-assisted --------------------------------------------------------------------

describe('phase 1, host-assisted (nfs-a to nfs-c)', () => {
  test('destination create_share fails -> migration_error, read-only cast undone', async () => {
    const sc = await scenario(HOST_DEST);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-c', method: 'createShare', mode: 'fail', times: 4 });
    await start(sc);
    await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    await expectCleanOnSource(sc, 'migration_error');
  }, 120_000);

  test('update_access on the destination fails giving the data node access -> migration_error', async () => {
    const sc = await scenario(HOST_DEST);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-c', method: 'updateAccess', mode: 'fail', times: 4 });
    await start(sc);
    await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    // The destination existed (create_share ran) and the cleanup deleted it.
    const deletes = faultCalls().filter((c) => c.method === 'deleteShare' && c.backend === 'ferry@nfs-c');
    expect(deletes.length).toBeGreaterThan(0);
    expect(deletes.every((c) => c.outcome === 'ok')).toBe(true);
    await expectCleanOnSource(sc, 'migration_error');
  }, 120_000);

  test('the copy worker fails copy_file on every attempt (3 workers) -> migration_error', async () => {
    const sc = await scenario(HOST_DEST);
    // Unlimited: each worker gets its own copy through FERRY_FAULTS.
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'fail', message: 'injected: disk on fire' });
    await start(sc);
    await m.taskStateBecomes(sc.id, ['migration_error']);
    expect((await getShare(sc.id))!.errorReason).toMatch(/the data copy failed 3 times; last: .*disk on fire/);
    await expectCleanOnSource(sc, 'migration_error');
  }, 120_000);

  fullRunRow('the copy worker killed with SIGKILL mid-copy -> started again, resumes from its journal, data_copying_completed', async () => {
    const sc = await scenario(HOST_DEST, { bigBytes: 8 * 1024 * 1024, files: 80 });
    process.env.FERRY_COPY_BYTES_PER_SECOND = String(2 * 1024 * 1024);
    const mid = await start(sc);
    const first = await copyUnderWay(copyOperationIdOf(mid));
    const workers = childrenOf(process.pid, 'functions/copy/main.ts');
    expect(workers).toHaveLength(1);
    process.kill(workers[0]!, 'SIGKILL');
    await eventually(async () => (processGone(workers[0]!) ? true : undefined), 'the killed worker gone');

    const phase1 = await m.taskStateBecomes(sc.id, ['data_copying_completed']);
    expect(phase1.status).toBe('migrating');
    const mig = (await getShare(sc.id))!.migration!;
    expect(mig.copyAttempts).toBe(2);
    const record = (await getCopyOperation(copyOperationIdOf(mid)))!;
    expect(record).toMatchObject({ status: 'completed', generation: first.generation + 1 });
    // The second worker skipped what the first had finished (counted, not copied again).
    expect(record.filesResumed).toBeGreaterThan(0);
    expect(record.filesResumed).toBeGreaterThanOrEqual(first.filesDone!);
    const destPath = mig.destination!.exportLocations[0]!;
    expect(shareDigest(destPath)).toEqual(sc.before);

    expect((await m.action(sc.id, { migration_complete: null })).status).toBe(202);
    expect(await m.taskStateBecomes(sc.id, ['migration_success'])).toMatchObject({ status: 'available', host: HOST_DEST });
    expect(shareDigest(destPath)).toEqual(sc.before);
    expect(existsSync(sc.path)).toBe(false);
  }, 120_000);
});

// ---- phase 2 -----------------------------------------------------------------------------------

describe('phase 2', () => {
  test('host-assisted: applying the rules to the destination fails -> migration_error, destination deleted, source restored', async () => {
    const sc = await scenario(HOST_DEST);
    await start(sc);
    await m.taskStateBecomes(sc.id, ['data_copying_completed']);
    expect(modeOf(sc.path)).toBe(0o555);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-c', method: 'updateAccess', mode: 'fail', times: 4 });
    expect((await m.action(sc.id, { migration_complete: null })).status).toBe(202);
    await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    await expectCleanOnSource(sc, 'migration_error');
  }, 120_000);

  test("driver-assisted: migration_complete fails -> upstream's outcome (share error, migration_error, one audit finding); operator cleanup", async () => {
    const sc = await scenario(DRIVER_DEST);
    await start(sc);
    await m.taskStateBecomes(sc.id, ['migration_driver_phase1_done']);
    const f = fault({ kind: 'share', backend: 'ferry@nfs-a', method: 'migrationComplete', mode: 'fail', times: 4 });
    expect((await m.action(sc.id, { migration_complete: null })).status).toBe(202);
    const s = await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(s.status).toBe('error');
    expect(f.refused()).toBe(4);
    expect(f.usedUp()).toBe(true);
    // No rollback (reference §1.9): the destination instance is error, the destination still holds the copy.
    const mig = (await getShare(sc.id))!.migration!;
    expect(mig.destination).toMatchObject({ status: 'error', ownsBackendShare: true });
    const instances = (await m.api('GET', `/shares/${sc.id}/instances`)).body.share_instances;
    expect(instances.map((i: any) => i.status).sort()).toEqual(['error', 'error']);
    const findings = (await runAudit()).findings;
    expect(findings).toEqual([{ kind: 'migration-leftovers', resource: `share ${sc.id}`, detail: expect.stringContaining(`destination backend share ${mig.destination!.id}`) }]);
    // migration_cancel refuses a share in error (its source may be gone after a driver failure).
    expect((await m.action(sc.id, { migration_cancel: null })).status).toBe(400);

    // The operator checks the source is intact and resets the share's status to available
    // (`manila reset-state --state available`); then migration_cancel runs the cleanup of what is held.
    expect(shareDigest(sc.path)).toEqual(sc.before);
    expect((await m.action(sc.id, { reset_status: { status: 'bogus' } })).status).toBe(400);
    expect((await m.action(sc.id, { reset_status: { status: 'available' } }, { token: 'demo:demo' })).status).toBe(403);
    expect((await m.action(sc.id, { reset_status: { status: 'available' } })).status).toBe(202);
    expect((await m.action(sc.id, { migration_cancel: null })).status).toBe(202);
    await taskStateTurns(sc.id, 'migration_cancelled');
    await expectCleanOnSource(sc, 'migration_cancelled');
  }, 120_000);

  test('host-assisted: deleting the retired source fails -> migration_success with the source on the record; migration_cancel finishes it', async () => {
    const sc = await scenario(HOST_DEST);
    const srcAllocatedWithShare = await allocatedOnSharePool(SRC);
    await start(sc);
    await m.taskStateBecomes(sc.id, ['data_copying_completed']);
    // DeleteRetired retries everything 4 times: five calls.
    const f = fault({ kind: 'share', backend: 'ferry@nfs-a', method: 'deleteShare', mode: 'fail', times: 5 });
    expect((await m.action(sc.id, { migration_complete: null })).status).toBe(202);
    const done = await m.taskStateBecomes(sc.id, ['migration_success']);
    expect(done).toMatchObject({ status: 'available', host: HOST_DEST });
    expect(f.refused()).toBe(5);
    expect(f.usedUp()).toBe(true);
    const mig = (await getShare(sc.id))!.migration!;
    expect(mig.retired).toMatchObject({ ownsBackendShare: true, host: SRC });
    expect(existsSync(sc.path)).toBe(true);
    expect(await allocatedOnSharePool(SRC)).toBe(srcAllocatedWithShare);
    expect((await runAudit()).findings).toEqual([
      { kind: 'migration-leftovers', resource: `share ${sc.id}`, detail: expect.stringContaining(`retired source backend share ${mig.retired!.id}`) },
    ]);

    // A first migration_cancel whose delete fails too (the cancel machine's cleanup retries 4 times):
    // still migration_success with the retired source on the record, and migration_cancel can run again.
    const again = fault({ kind: 'share', backend: 'ferry@nfs-a', method: 'deleteShare', mode: 'fail', times: 5 });
    expect((await m.action(sc.id, { migration_cancel: null })).status).toBe(202);
    await eventually(async () => (again.usedUp() ? true : undefined), 'the failing cancel to use up its fault');
    const kept = await eventually(async () => {
      const r = (await getShare(sc.id))!;
      return r.migration && !r.migration.cancelRequested ? r : undefined;
    }, 'the failed cancel recorded');
    expect(again.refused()).toBe(5);
    expect(kept).toMatchObject({ taskState: 'migration_success', status: 'available', migration: { retired: { ownsBackendShare: true } } });
    expect(existsSync(sc.path)).toBe(true);
    expect((await runAudit()).findings.map((x) => x.kind)).toEqual(['migration-leftovers']);

    expect((await m.action(sc.id, { migration_cancel: null })).status).toBe(202);
    await eventually(async () => ((await getShare(sc.id))!.migration === null ? true : undefined), 'the retired source cleaned up');
    expect(await m.share(sc.id)).toMatchObject({ status: 'available', host: HOST_DEST, task_state: 'migration_success' });
    expect(existsSync(sc.path)).toBe(false);
    expect(existsSync(sc.path + '.access.json')).toBe(false);
    expect(await allocatedOnSharePool(SRC)).toBe(srcAllocatedWithShare - 1);
    expect(await allocatedOnSharePool(HOST_DEST)).toBe(sc.destAllocatedBefore + 1);
    const newPath = (await m.api('GET', `/shares/${sc.id}/export_locations`)).body.export_locations[0].path;
    expect(shareDigest(newPath)).toEqual(sc.before);
    expect(rulesOf(newPath + '.access.json')).toEqual(OWN_RULES);
    expect((await m.api('GET', `/shares/${sc.id}/instances`)).body.share_instances).toHaveLength(1);
    expect(await getCopyOperation(copyOperationIdOf(sc.migrationId!))).toBeUndefined();
  }, 120_000);
});

// ---- the cleanup itself fails ------------------------------------------------------------------

describe('the cleanup fails', () => {
  test('copy fails, then the cleanup cannot delete the destination -> migration_error with leftovers; migration_cancel finishes', async () => {
    const sc = await scenario(HOST_DEST);
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'fail' });
    const del = fault({ kind: 'share', backend: 'ferry@nfs-c', method: 'deleteShare', mode: 'fail' });
    await start(sc);
    const s = await m.taskStateBecomes(sc.id, ['migration_error']);
    expect(s.status).toBe('available');
    // The cleanup step ran five times (Retry MaxAttempts 4), each refused at delete_share.
    expect(del.refused()).toBe(5);
    const mig = (await getShare(sc.id))!.migration!;
    expect(mig).toMatchObject({ readOnlyCast: true, dataNodeAccess: false, destination: { ownsBackendShare: true } });
    const findings = (await runAudit()).findings;
    expect(findings).toHaveLength(1);
    expect(findings[0]).toMatchObject({ kind: 'migration-leftovers', resource: `share ${sc.id}` });
    for (const held of [`destination backend share ${mig.destination!.id}`, `destination capacity on ${HOST_DEST}`, 'read-only cast']) {
      expect(findings[0]!.detail).toContain(held);
    }
    // What is left is real: the destination is on its backend, the source still read-only (its own rules as ro, no data node).
    expect(existsSync(mig.destination!.exportLocations[0]!)).toBe(true);
    expect(rulesOf(sc.path + '.access.json')).toEqual(['10.8.0.1:ro', '10.9.0.0/24:ro']);
    expect(await allocatedOnSharePool(HOST_DEST)).toBe(sc.destAllocatedBefore + 1);
    // A new migration is refused until the leftovers are cleaned up.
    expect((await m.action(sc.id, migrationStartBody(HOST_DEST))).status).toBe(400);

    clearFaults();
    expect((await m.action(sc.id, { migration_cancel: null })).status).toBe(202);
    await taskStateTurns(sc.id, 'migration_cancelled');
    await expectCleanOnSource(sc, 'migration_cancelled');
  }, 120_000);
});

// ---- whole-stack crashes -----------------------------------------------------------------------

describe('the whole stack stops mid-copy', () => {
  fullRunRow('stack.restart() in this process mid-copy: the RUNNING execution resumes and completes with identical data', async () => {
    const sc = await scenario(HOST_DEST, { bigBytes: 8 * 1024 * 1024, files: 80 });
    // stop() lets in-flight tasks (this copy) run for up to 10 s before DynamoDB Local goes: the
    // copy must outlast that, or it simply finishes before the restart. Two threads at 256 KiB/s
    // each: big.bin alone takes ~32 s.
    process.env.FERRY_COPY_THREADS = '2';
    process.env.FERRY_COPY_BYTES_PER_SECOND = String(512 * 1024);
    const mid = await start(sc);
    const first = await copyUnderWay(copyOperationIdOf(mid));
    await currentStack().restart();
    // Still mid-copy when the stack came back (else this test would prove nothing about resuming).
    expect((await getCopyOperation(copyOperationIdOf(mid)))!.status).toBe('running');
    const phase1 = await m.taskStateBecomes(sc.id, ['data_copying_completed']);
    expect(phase1.status).toBe('migrating');
    const record = (await getCopyOperation(copyOperationIdOf(mid)))!;
    // A new worker of the resumed execution finished it, skipping what the first had journaled.
    expect(record.status).toBe('completed');
    expect(record.generation).toBeGreaterThan(first.generation);
    expect(record.filesResumed).toBeGreaterThanOrEqual(first.filesDone!);
    expect(record.filesResumed).toBeGreaterThan(0);
    const destPath = (await getShare(sc.id))!.migration!.destination!.exportLocations[0]!;
    expect(shareDigest(destPath)).toEqual(sc.before);
    await eventually(async () => (childrenOf(process.pid, 'functions/copy/main.ts').length === 0 ? true : undefined), 'no copy worker left running');

    expect((await m.action(sc.id, { migration_complete: null })).status).toBe(202);
    expect(await m.taskStateBecomes(sc.id, ['migration_success'])).toMatchObject({ status: 'available', host: HOST_DEST });
    expect(shareDigest(destPath)).toEqual(sc.before);
  }, 180_000);

  test('kill -9 of the stack process mid-copy: the worker exits with it; started again on the same data, the copy completes', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'ferry-kill9-'));
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env: NodeJS.ProcessEnv = { ...process.env, FERRY_DATA_DIR: dataDir, FERRY_PORT: String(port), FERRY_COPY_BYTES_PER_SECOND: String(2 * 1024 * 1024) };
    // This process's in-process stack's endpoints and faults are not the child's.
    for (const k of ['FERRY_DYNAMODB_ENDPOINT', 'FERRY_S3_ENDPOINT', 'FERRY_SFN_ENDPOINT', 'FERRY_FAULTS']) delete env[k];
    const children: ChildProcess[] = [];
    const orphans: number[] = [];
    const jvmPids: number[] = [];
    const startStack = async (): Promise<ChildProcess> => {
      const child = spawn(process.execPath, ['--openssl-legacy-provider', '--import', 'tsx', 'infra/local/main.ts'], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      const output: string[] = [];
      child.stderr!.on('data', (d) => output.push(String(d)));
      await new Promise<void>((resolve, reject) => {
        const lines = createInterface({ input: child.stdout! });
        lines.on('line', (line) => {
          if (line.startsWith('ferry ready')) resolve();
        });
        child.once('exit', (code, signal) => reject(new Error(`the stack exited (${code ?? signal}) before it was ready: ${output.join('')}`)));
      });
      // Its DynamoDB Local (a JVM child): remembered, to be ended by pid should a failed test leave it.
      jvmPids.push(...childrenOf(child.pid!, 'DynamoDBLocal.jar'));
      return child;
    };
    const exited = (child: ChildProcess) => (child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => child.once('exit', () => r())));
    const remote = manilaClient(() => url);
    try {
      const first = await startStack();
      const { id, path } = await remote.availableShare('nfs-a');
      await fillShare(path, { bigBytes: 8 * 1024 * 1024, files: 80 });
      const before = shareDigest(path);
      expect((await remote.action(id, { allow_access: { access_type: 'ip', access_to: '10.9.0.0/24', access_level: 'rw' } })).status).toBe(200);
      const typeC = await remote.typePinnedTo('nfs-c');
      expect((await remote.action(id, migrationStartBody(HOST_DEST, {}, { new_share_type_id: typeC }))).status).toBe(202);
      await eventually(async () => {
        const p = (await remote.action(id, { migration_get_progress: null })).body;
        return p.task_state === 'data_copying_in_progress' && p.details.files_copied > 0 && p.details.bytes_copied < p.details.bytes_total ? p : undefined;
      }, 'the copy under way', 60_000);
      const workers = childrenOf(first.pid!, 'functions/copy/main.ts');
      expect(workers).toHaveLength(1);
      // DynamoDB Local is a JVM child of the stack; the kernel ends it with its parent (infra/local/dynamo-process.ts).
      const jvms = childrenOf(first.pid!, 'DynamoDBLocal.jar');
      expect(jvms).toHaveLength(1);
      orphans.push(...workers);

      first.kill('SIGKILL');
      await exited(first);
      // The worker notices its parent is gone and exits by itself (FERRY_COPY_EXIT_WITH_PARENT).
      await eventually(async () => (processGone(workers[0]!) ? true : undefined), 'the orphaned copy worker exits on its own', 10_000);
      // The rest of the crash: DynamoDB Local goes by itself (the parent-death signal), as the start-stop test shows.
      await eventually(async () => (processGone(jvms[0]!) ? true : undefined), 'DynamoDB Local gone with its parent', 10_000);

      const second = await startStack();
      const phase1 = await remote.taskStateBecomes(id, ['data_copying_completed'], 120_000);
      expect(phase1.status).toBe('migrating');
      const destShares = readdirSync(join(dataDir, 'shares', 'nfs-c')).filter((n) => /^share-[0-9a-f-]{36}$/.test(n));
      expect(destShares).toHaveLength(1);
      const destPath = join(dataDir, 'shares', 'nfs-c', destShares[0]!);
      expect(shareDigest(destPath)).toEqual(before);

      expect((await remote.action(id, { migration_complete: null })).status).toBe(202);
      expect(await remote.taskStateBecomes(id, ['migration_success'], 120_000)).toMatchObject({ status: 'available', host: HOST_DEST });
      expect((await remote.api('GET', `/shares/${id}/export_locations`)).body.export_locations[0].path).toBe(destPath);
      expect(shareDigest(destPath)).toEqual(before);
      expect(existsSync(path)).toBe(false);

      // The operator's audit against the running stack (bin/ferry.ts finds it through <data dir>/stack.json).
      const auditEnv = { ...env };
      delete auditEnv.FERRY_TABLE_VOLUME;
      const audit = spawnSync(process.execPath, ['--import', 'tsx', 'bin/ferry.ts', 'audit', '--json'], { cwd: REPO_ROOT, env: auditEnv, encoding: 'utf8', timeout: 60_000 });
      expect(audit.status, audit.stderr).toBe(0);
      const report = JSON.parse(audit.stdout);
      expect(report.findings).toEqual([]);
      expect(report.checked['share migrations']).toBe(0);

      second.kill('SIGTERM');
      await exited(second);
    } finally {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
      for (const pid of [...orphans, ...jvmPids]) if (!processGone(pid)) process.kill(pid, 'SIGKILL');
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 240_000);
});


/**
 * The read model of operations (functions/ops) without a stack: each kind of operation as a view
 * of the records its steps keep (share migrations with their copy or the driver's progress and, on
 * failure, the reason their migration recorded; failovers; server operations), the rate and ETA,
 * operation references, what `ferry watch` prints, and the /ferry routes that need no table.
 */
import { describe, expect, test } from 'vitest';
import { formatBar, formatDuration, progressLine } from '../../bin/ops-format.js';
import type { CopyOperationRecord } from '../../functions/copy/progress.js';
import { FerryError } from '../../functions/core/errors.js';
import { migrationTransition } from '../../functions/migration/transitions.js';
import { parseRef } from '../../functions/ops/model.js';
import { etaSeconds, fractionOf, rateFromSamples, rateFromTimestamps } from '../../functions/ops/rate.js';
import { handleFerryRequest } from '../../functions/ops/routes.js';
import { copyView, replicationView, serverOpView, shareMigrationView } from '../../functions/ops/views.js';
import type { ReplicationOperation } from '../../functions/replication/operation-record.js';
import type { Instance, InstanceAction, Migration } from '../../functions/servers/model.js';
import type { Share, ShareMigration } from '../../functions/shares/model.js';

const T0 = '2026-03-01T10:00:00.000Z';
const T10 = '2026-03-01T10:00:10.000Z';

const migration = (o: Partial<ShareMigration> = {}): ShareMigration => ({
  id: 'm1', destinationHost: 'ferry@nfs-c#pool0', newShareTypeId: null, newShareNetworkId: null, writable: false, preserveMetadata: false, nondisruptive: false,
  preserveSnapshots: false, forceHostAssisted: false, approach: 'host', destination: null, retired: null, readOnlyCast: true, dataNodeAccess: true,
  copyOperationId: 'share-migration-m1', copyAttempts: 1, driverPolls: 0, cancelRequested: false, startedAt: T0, error: null, ...o,
});
const share = (o: Partial<Share> = {}): Share => ({
  id: 's1', projectId: 'demo', userId: 'demo', name: 'x', description: null, size: 1, shareProto: 'NFS', status: 'migrating', taskState: 'data_copying_in_progress',
  shareTypeId: 't1', shareTypeName: 'default', shareNetworkId: null, availabilityZone: 'nova', metadata: {}, isPublic: false, instanceId: 'i1',
  host: 'ferry@nfs-a#pool0', exportLocations: ['/a'], capacity: null, ownsBackendShare: true, accessRules: {}, errorReason: null, migration: migration(),
  createdAt: T0, updatedAt: T0, version: 3, ...o,
});
const copy = (o: Partial<CopyOperationRecord> = {}): CopyOperationRecord => ({
  pk: 'COPY#share-migration-m1', sk: 'COPY', operationId: 'share-migration-m1', status: 'running', generation: 1, source: '/a', destination: '/c',
  bytesTotal: 1000, bytesDone: 250, filesTotal: 8, filesDone: 2, filesResumed: 0, currentFile: 'big.bin', startedAt: T0, updatedAt: T10, ...o,
});

describe('rate and ETA', () => {
  test('from timestamps: done over the time between them; nothing done or no time: none', () => {
    expect(rateFromTimestamps(250, T0, T10)).toBe(25);
    expect(rateFromTimestamps(0, T0, T10)).toBeNull();
    expect(rateFromTimestamps(10, T10, T10)).toBeNull();
  });
  test('from samples: over the last 10 s only, so a stall shows as a falling rate', () => {
    const samples = [{ at: 0, done: 0 }, { at: 5_000, done: 500 }, { at: 20_000, done: 2000 }, { at: 25_000, done: 2000 }, { at: 30_000, done: 2000 }];
    // 20 s -> 30 s: nothing moved.
    expect(rateFromSamples(samples)).toBe(0);
    expect(rateFromSamples(samples.slice(0, 3))).toBe(100);
    expect(rateFromSamples([{ at: 0, done: 1 }])).toBeNull();
  });
  test('ETA and fraction', () => {
    expect(etaSeconds(250, 1000, 25)).toBe(30);
    expect(etaSeconds(1000, 1000, null)).toBe(0);
    expect(etaSeconds(10, 1000, 0)).toBeNull();
    expect(fractionOf(250, 1000)).toBe(0.25);
    expect(fractionOf(1, 0)).toBeNull();
  });
});

describe('operation references', () => {
  test('family:id, server:uuid@request, a bare id; a wrong family is refused with the ones there are', () => {
    expect(parseRef('share:abc')).toEqual({ family: 'share', id: 'abc' });
    expect(parseRef('server:u1@req-9')).toEqual({ family: 'server', id: 'u1', requestId: 'req-9' });
    expect(parseRef(' 6f0c ')).toEqual({ id: '6f0c' });
    expect(parseRef('backend:ferry@lvm-r')).toEqual({ family: 'backend', id: 'ferry@lvm-r' });
    expect(() => parseRef('volume:1')).toThrow(/unknown kind of operation "volume".*share:ID/);
    expect(() => parseRef('share:')).toThrow(/names no id/);
  });
});

describe('share migrations', () => {
  test('copying: bytes and files of the copy, its own rate and ETA, the file it copies', () => {
    const v = shareMigrationView(share(), copy())!;
    expect(v).toMatchObject({ ref: 'share:s1', kind: 'share-migration', id: 'm1', status: 'running', fraction: 0.25, rate: 25, etaSeconds: 30 });
    expect(v.progress).toEqual({ done: 250, total: 1000, unit: 'bytes', filesDone: 2, filesTotal: 8 });
    expect(v.step).toBe('host-assisted: copying data: big.bin');
    expect(v.resource).toBe('share s1 (x): ferry@nfs-a#pool0 -> ferry@nfs-c#pool0 (host-assisted)');
  });
  test("driver-assisted: the driver's progress as the last poll recorded it", () => {
    const s = share({ taskState: 'migration_driver_in_progress', migration: migration({ approach: 'driver', driverPolls: 7, driverProgress: { percent: 40, bytesDone: 40, bytesTotal: 100, at: T10 } }) });
    expect(shareMigrationView(s)).toMatchObject({ status: 'running', fraction: 0.4, progress: { done: 40, total: 100, unit: 'bytes' }, step: 'driver-assisted: copying (poll 7)' });
  });
  test('phase 1 done: waiting for the operator, at 100 %', () => {
    expect(shareMigrationView(share({ taskState: 'data_copying_completed' }))).toMatchObject({ status: 'waiting', fraction: 1, step: 'phase 1 done (host-assisted): waiting for migration-complete' });
  });
  test('failed and cleaned up: the reason the migration recorded when it ended (the transition keeps it on the share)', () => {
    const s = share({ taskState: 'data_copying_in_progress', migration: migration({ readOnlyCast: false, dataNodeAccess: false, copyOperationId: null }) });
    const after = migrationTransition(s, { type: 'finish', at: T10, migrationId: 'm1', outcome: 'migration_error', reason: 'the data copy failed 3 times; last: disk on fire' });
    if (after instanceof FerryError) throw after;
    expect(after.migration).toBeNull();
    expect(after.lastMigration).toEqual({ id: 'm1', outcome: 'migration_error', reason: 'the data copy failed 3 times; last: disk on fire', destinationHost: 'ferry@nfs-c#pool0', approach: 'host', startedAt: T0, endedAt: T10 });
    expect(shareMigrationView(after)).toMatchObject({ status: 'failed', reason: 'the data copy failed 3 times; last: disk on fire', endedAt: T10, step: 'failed' });
  });
  test('a failure that left something held: failed with what is left and why', () => {
    const s = share({ taskState: 'migration_error', status: 'available', migration: migration({ error: 'cleanup incomplete: data node access rules; boom' }) });
    expect(shareMigrationView(s)).toMatchObject({ status: 'failed', reason: 'cleanup incomplete: data node access rules; boom' });
  });
  test('success and a poll are recorded too; a share that never migrated has no operation', () => {
    const polled = migrationTransition(share({ taskState: 'migration_driver_in_progress' }), { type: 'driver-polled', at: T10, migrationId: 'm1', progress: { percent: 5, at: T10 } });
    expect((polled as Share).migration!.driverProgress).toEqual({ percent: 5, at: T10 });
    expect(shareMigrationView(share({ migration: null, taskState: null }))).toBeUndefined();
    expect(shareMigrationView(share({ migration: null, taskState: 'migration_success', lastMigration: { id: 'm0', outcome: 'migration_success', reason: null, destinationHost: 'd', approach: 'driver', startedAt: T0, endedAt: T10 } }))).toMatchObject({
      status: 'succeeded',
      fraction: 1,
      id: 'm0',
    });
  });
  test('a copy record on its own', () => {
    expect(copyView(copy({ status: 'failed', error: 'EIO', finishedAt: T10 }))).toMatchObject({ ref: 'copy:share-migration-m1', status: 'failed', reason: 'EIO', endedAt: T10 });
  });
});

describe('failovers', () => {
  const op = (o: Partial<ReplicationOperation> = {}): ReplicationOperation => ({
    id: 'op1', kind: 'failover', host: 'ferry@lvm-r', requestedBackendId: 'site-b', failback: false, target: 'site-b', status: 'running', batchCount: 10,
    volumeCount: 1000, volumesDone: 400, requestedBy: 'admin', createdAt: T0, updatedAt: T10, ...o,
  });
  test('volumes done of how many, at the rate of the record', () => {
    expect(replicationView(op())).toMatchObject({ ref: 'replication:op1', kind: 'failover', fraction: 0.4, rate: 40, etaSeconds: 15, progress: { done: 400, total: 1000, unit: 'volumes' }, resource: 'backend ferry@lvm-r -> site-b' });
    expect(replicationView(op({ volumeCount: undefined, batchCount: undefined, volumesDone: undefined })).step).toBe("listing the backend's volumes");
  });
  test('failback and drills are named; a failed one carries its error', () => {
    expect(replicationView(op({ failback: true, target: '' })).kind).toBe('failback');
    expect(replicationView(op({ kind: 'drill', status: 'failed', error: 'no replica of volume v9' }))).toMatchObject({ kind: 'drill', status: 'failed', reason: 'no replica of volume v9', endedAt: T10 });
  });
});

describe('server operations', () => {
  const action = (o: Partial<InstanceAction> = {}): InstanceAction => ({
    action: 'live-migration', instanceUuid: 'u1', requestId: 'req-1', userId: 'admin', projectId: 'admin', startTime: T0, finishTime: null, message: null, updatedAt: T10,
    events: [
      { event: 'conductor_live_migrate_instance', startTime: T0, finishTime: T0, result: 'Success', traceback: null, host: null, details: null },
      { event: 'compute_live_migration', startTime: T0, finishTime: null, result: null, traceback: null, host: 'cmp1', details: null },
    ],
    ...o,
  });
  const instance = (o: Partial<Instance> = {}) => ({ uuid: 'u1', name: 'vm1', host: 'cmp1', vmState: 'active', taskState: 'migrating', fault: null, operation: { kind: 'live_migration', requestId: 'req-1', migrationUuid: 'mig1' }, ...o }) as unknown as Instance;
  const mig = { uuid: 'mig1', sourceCompute: 'cmp1', destCompute: 'cmp2', diskTotal: 1000, diskProcessed: 600, updatedAt: T10 } as unknown as Migration;
  test('a live migration: its bytes copied, the event it is at, the hosts', () => {
    expect(serverOpView(action(), instance(), mig)).toMatchObject({
      ref: 'server:u1@req-1',
      kind: 'live-migration',
      status: 'running',
      fraction: 0.6,
      step: 'live migration (compute) [task_state migrating]',
      resource: 'server u1 (vm1): cmp1 -> cmp2',
    });
  });
  test("failed: the failed event's words, else the instance's fault", () => {
    const failed = action({ message: 'Error', events: [{ event: 'compute_live_migration', startTime: T0, finishTime: T10, result: 'Error', traceback: 'tb', host: 'cmp1', details: 'destination host cmp2 is down' }] });
    expect(serverOpView(failed, instance({ operation: null, taskState: null }))).toMatchObject({ status: 'failed', reason: 'destination host cmp2 is down', step: 'failed at live migration (compute)' });
    expect(serverOpView(action({ message: 'Error', events: [] }), instance({ operation: null, fault: { code: 500, message: 'No valid host', details: '', created: T10 } })).reason).toBe('No valid host');
  });
  test('a resize that reached VERIFY_RESIZE waits for the operator; another ended operation succeeded', () => {
    expect(serverOpView(action({ action: 'resize' }), instance({ operation: null, vmState: 'resized' })).status).toBe('waiting');
    expect(serverOpView(action({ action: 'shelve' }), instance({ operation: null }))).toMatchObject({ status: 'succeeded', fraction: 1 });
  });
});

describe('what ferry watch prints', () => {
  test('bar, percent, amount, rate, ETA and step on one line; a moving marker when nothing measures it', () => {
    const v = shareMigrationView(share(), copy())!;
    expect(progressLine(v, { rate: 1024 * 1024, etaSeconds: 75 })).toBe('[######..................]   25 %  250 B of 1000 B, 2 of 8 files  1.0 MiB/s  ETA 1:15  host-assisted: copying data: big.bin');
    expect(formatBar(null, 0, 10)).toBe('[<=>       ]');
    expect(formatBar(null, 3, 10)).toBe('[   <=>    ]');
    expect(formatDuration(3725)).toBe('1:02:05');
  });
});

describe('the /ferry routes', () => {
  const event = (path: string, auth?: { userId: string; projectId: string; roles: string }) =>
    ({ rawPath: path, rawQueryString: '', headers: {}, requestContext: { http: { method: 'GET', path }, ...(auth ? { authorizer: { lambda: auth } } : {}) } }) as never;
  test('the console is a page with no data in it; the operations need an admin', async () => {
    const page = await handleFerryRequest(event('/ferry/console'));
    expect(page.statusCode).toBe(200);
    expect(page.headers!['Content-Type']).toMatch(/^text\/html/);
    expect(page.body).toMatch(/<tbody id="inflight">/);
    expect((await handleFerryRequest(event('/ferry/ops'))).statusCode).toBe(401);
    const demo = await handleFerryRequest(event('/ferry/ops', { userId: 'demo', projectId: 'demo', roles: 'member,reader' }));
    expect(demo.statusCode).toBe(403);
    expect(JSON.parse(demo.body!)).toEqual({ forbidden: { code: 403, message: "Policy doesn't allow ferry:ops to be performed." } });
    expect((await handleFerryRequest(event('/ferry/nothing'))).statusCode).toBe(404);
  });
});

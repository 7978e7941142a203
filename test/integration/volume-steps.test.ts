/**
 * Volume repo, scheduler and steps against DynamoDB Local, with the real local driver on a temp
 * directory: capacity races, each create step failing (fault injection), delete failing,
 * idempotency, type and backend-object claims.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AuthContext } from '../../functions/core/auth.js';
import { db } from '../../functions/core/db.js';
import { BadRequest, Conflict } from '../../functions/core/errors.js';
import { tableName } from '../../functions/core/tables.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { putBackend } from '../../functions/volumes/backends.js';
import type { Volume } from '../../functions/volumes/model.js';
import { claimKey, getVolume, getVolumeOrThrow, insertVolume, poolKey, updateVolume } from '../../functions/volumes/repo.js';
import { recordNewVolume } from '../../functions/volumes/create.js';
import { gatherPools, NoValidBackend, reserveOnPool, scheduleVolume } from '../../functions/volumes/scheduler.js';
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';
import * as steps from '../../functions/volumes/steps.js';
import { createVolumeType, deleteVolumeType, getVolumeTypeByName } from '../../functions/volumes/types.js';
import { useLocalDynamo } from '../support/dynamo.js';

const DEMO: AuthContext = { userId: 'demo', projectId: 'demo', isAdmin: false, roles: ['member'] };
let ddb: LocalDynamo;
let dataDir: string;

beforeAll(async () => {
  ddb = await useLocalDynamo();
  dataDir = await mkdtemp(join(tmpdir(), 'ferry-volsteps-'));
  await seedVolumeSandbox({ dataDir });
  // A small backend of its own for the capacity races, reached through its own type.
  await putBackend({ host: 'ferry@race', driver: 'local', root: join(dataDir, 'backends', 'race'), pools: [{ name: 'pool0', totalCapacityGb: 100 }], serviceUuid: 'race-svc', volumeBackendName: 'race' });
  await createVolumeType({ name: 'race', extraSpecs: { volume_backend_name: 'race' } });
});
afterAll(async () => {
  await ddb?.stop();
  clearDriverCache();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});
afterEach(() => clearFaults());

const newVolume = (size: number, volumeType: string | null = null) =>
  recordNewVolume(DEMO, { size, name: null, description: null, volumeType, availabilityZone: null, metadata: {}, serverId: null });

async function allocated(poolHost: string): Promise<number> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: poolKey(poolHost), ConsistentRead: true }));
  return (out.Item?.allocatedGb as number | undefined) ?? 0;
}

async function backendObject(v: Volume) {
  return (await driverForHost(v.host!)).getVolume(v.backendName);
}

async function createThroughSteps(size: number, volumeType: string | null = null): Promise<Volume> {
  const v = await newVolume(size, volumeType);
  await steps.schedule(v.id);
  await steps.createOnBackend(v.id);
  await steps.markAvailable(v.id);
  return getVolumeOrThrow(v.id);
}

describe('volume-create steps', () => {
  test('schedule, create and mark available: capacity, claim and backend object all recorded', async () => {
    // Act
    const v = await createThroughSteps(3);
    // Assess
    expect(v.status).toBe('available');
    expect(v.capacity).toEqual({ pool: v.host, gb: 3 });
    expect(v.backendName).toBe(`volume-${v.id}`);
    expect(await backendObject(v)).toEqual({ backendName: v.backendName, sizeGb: 3 });
    const claim = await db().send(new GetCommand({ TableName: tableName('volume'), Key: claimKey(v.host!, v.backendName) }));
    expect(claim.Item?.volumeId).toBe(v.id);
  });

  test('running every step twice leaves the same state', async () => {
    // Prepare
    const v = await newVolume(2);
    const first = await steps.schedule(v.id);
    const allocatedAfterFirst = await allocated(first.host);
    // Act
    const second = await steps.schedule(v.id);
    await steps.createOnBackend(v.id);
    await steps.createOnBackend(v.id);
    await steps.markAvailable(v.id);
    const once = await getVolumeOrThrow(v.id);
    await steps.markAvailable(v.id);
    await steps.createOnBackend(v.id);
    // Assess
    expect(second.host).toBe(first.host);
    expect(await allocated(first.host)).toBe(allocatedAfterFirst);
    expect(await getVolumeOrThrow(v.id)).toEqual(once);
  });

  test('no pool large enough: NoValidBackend, then rollback marks error with the reason and holds nothing', async () => {
    // Prepare
    const v = await newVolume(5000);
    // Act
    const failure = await steps.schedule(v.id).catch((e: Error) => e);
    await steps.rollbackCreate(v.id, { Error: (failure as Error).name, Cause: (failure as Error).message });
    // Assess
    expect(failure).toBeInstanceOf(NoValidBackend);
    const after = await getVolumeOrThrow(v.id);
    expect(after.status).toBe('error');
    expect(after.errorReason).toMatch(/No valid backend was found\. No pool can take a 5000 GiB volume/);
    expect(after.capacity ?? null).toBeNull();
  });

  test.each(['fail', 'fail-after'] as const)('createVolume %s: rollback leaves error, capacity released, no backend object', async (mode) => {
    // Prepare
    const v = await newVolume(4);
    const { host } = await steps.schedule(v.id);
    const before = await allocated(host);
    injectFault({ kind: 'volume', method: 'createVolume', mode });
    // Act
    const failure = await steps.createOnBackend(v.id).catch((e: Error) => e);
    clearFaults();
    await steps.rollbackCreate(v.id, { Error: 'DriverError', Cause: (failure as Error).message });
    // Assess
    expect(failure).toBeInstanceOf(Error);
    const after = await getVolumeOrThrow(v.id);
    expect(after.status).toBe('error');
    expect(after.capacity ?? null).toBeNull();
    expect(await allocated(host)).toBe(before - 4);
    expect(await backendObject(after)).toBeUndefined();
  });

  test('mark-available refused (an admin reset the volume meanwhile): rollback removes the created object', async () => {
    // Prepare
    const v = await newVolume(1);
    const { host } = await steps.schedule(v.id);
    await steps.createOnBackend(v.id);
    await updateVolume(v.id, { type: 'reset-status', at: new Date().toISOString(), status: 'maintenance' });
    const before = await allocated(host);
    // Act
    const failure = await steps.markAvailable(v.id).catch((e: Error) => e);
    await steps.rollbackCreate(v.id, { Error: 'InvalidVolume', Cause: (failure as Error).message });
    // Assess
    expect(failure).toBeInstanceOf(BadRequest);
    const after = await getVolumeOrThrow(v.id);
    expect(after.status).toBe('error');
    expect(await allocated(host)).toBe(before - 1);
    expect(await backendObject(after)).toBeUndefined();
  });

  test('rollback whose backend delete fails keeps the capacity held (the object may still exist)', async () => {
    // Prepare
    const v = await newVolume(1);
    const { host } = await steps.schedule(v.id);
    await steps.createOnBackend(v.id);
    const before = await allocated(host);
    injectFault({ kind: 'volume', method: 'deleteVolume', mode: 'fail' });
    // Act
    await steps.rollbackCreate(v.id, { Error: 'X', Cause: 'later step failed' });
    // Assess
    const after = await getVolumeOrThrow(v.id);
    expect(after.status).toBe('error');
    expect(after.errorReason).toMatch(/rollback could not delete/);
    expect(await allocated(host)).toBe(before);
    expect(after.capacity).toEqual({ pool: host, gb: 1 });
  });

  test('running the rollback twice changes nothing more', async () => {
    const v = await newVolume(1);
    await steps.schedule(v.id);
    await steps.rollbackCreate(v.id, { Error: 'X', Cause: 'boom' });
    const once = await getVolumeOrThrow(v.id);
    await steps.rollbackCreate(v.id, { Error: 'X', Cause: 'boom' });
    expect(await getVolumeOrThrow(v.id)).toEqual(once);
  });
});

describe('capacity races', () => {
  test('two concurrent reservations that together exceed a pool: one wins, the pool is never over-allocated', async () => {
    // Prepare
    const [a, b] = await Promise.all([newVolume(60, 'race'), newVolume(60, 'race')]);
    const pool = (await gatherPools('ferry@race'))[0]!;
    // Act
    const outcomes = await Promise.all([reserveOnPool(a!, pool), reserveOnPool(b!, pool)]);
    // Assess
    expect(outcomes.map((o) => o.kind).sort()).toEqual(['pool-full', 'reserved']);
    expect(await allocated(pool.host)).toBe(60);
  });

  test('concurrent schedulers on a nearly full pool: the losers get NoValidBackend, allocation stays within total', async () => {
    // Prepare: 60 GiB already held by the winner above; three more ask for 30 each (only one fits).
    const volumes = await Promise.all([newVolume(30, 'race'), newVolume(30, 'race'), newVolume(30, 'race')]);
    // Act
    const results = await Promise.allSettled(volumes.map((v) => scheduleVolume(v.id)));
    // Assess
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results.filter((r) => r.status === 'rejected')) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(NoValidBackend);
    expect(await allocated('ferry@race#pool0')).toBe(90);
  });
});

describe('volume-delete steps', () => {
  test('delete: backend object, capacity, claim and type count all released, record removed', async () => {
    // Prepare
    const v = await createThroughSteps(2);
    const before = await allocated(v.host!);
    // Act
    await steps.beginDelete(v.id);
    await steps.deleteOnBackend(v.id);
    await steps.finishDelete(v.id);
    await steps.finishDelete(v.id); // idempotent
    // Assess
    expect(await getVolume(v.id)).toBeUndefined();
    expect(await allocated(v.host!)).toBe(before - 2);
    expect(await backendObject(v)).toBeUndefined();
    const claim = await db().send(new GetCommand({ TableName: tableName('volume'), Key: claimKey(v.host!, v.backendName) }));
    expect(claim.Item).toBeUndefined();
  });

  test('deleteVolume failing: error_deleting, backend object and capacity intact', async () => {
    // Prepare
    const v = await createThroughSteps(2);
    const before = await allocated(v.host!);
    await steps.beginDelete(v.id);
    injectFault({ kind: 'volume', method: 'deleteVolume', mode: 'fail' });
    // Act
    const failure = await steps.deleteOnBackend(v.id).catch((e: Error) => e);
    await steps.markErrorDeleting(v.id, { Error: 'DriverError', Cause: JSON.stringify({ errorType: 'DriverError', errorMessage: (failure as Error).message }) });
    // Assess
    const after = await getVolumeOrThrow(v.id);
    expect(after.status).toBe('error_deleting');
    expect(after.errorReason).toBe((failure as Error).message);
    expect(await backendObject(v)).toEqual({ backendName: v.backendName, sizeGb: 2 });
    expect(await allocated(v.host!)).toBe(before);
  });

  test('begin-delete refuses an in-use volume and writes nothing', async () => {
    const v = await createThroughSteps(1);
    const inUse = await updateVolume(v.id, { type: 'reset-status', at: new Date().toISOString(), status: 'in-use' });
    await expect(steps.beginDelete(v.id)).rejects.toThrow(/Volume status must be available or error/);
    expect(await getVolumeOrThrow(v.id)).toEqual(inUse);
  });
});

describe('types and claims', () => {
  test('two concurrent creates of one type name: exactly one succeeds', async () => {
    const results = await Promise.allSettled([createVolumeType({ name: 'gold' }), createVolumeType({ name: 'gold' })]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect((results.find((r) => r.status === 'rejected') as PromiseRejectedResult).reason).toBeInstanceOf(Conflict);
  });

  test('a type in use cannot be deleted; once its volumes are gone it can', async () => {
    // Prepare
    const type = await createVolumeType({ name: 'silver' });
    const v = await createThroughSteps(1, 'silver');
    // Act + Assess
    await expect(deleteVolumeType(type.id)).rejects.toThrow(/deletion is not allowed with volumes present with the type/);
    await steps.beginDelete(v.id);
    await steps.deleteOnBackend(v.id);
    await steps.finishDelete(v.id);
    await deleteVolumeType(type.id);
    await expect(getVolumeTypeByName('silver')).rejects.toThrow('Volume type with name silver could not be found.');
  });

  test('a backend object is claimed by one managed volume only', async () => {
    // Prepare
    const v = await newVolume(1);
    const base = { ...(await getVolumeOrThrow(v.id)), status: 'managing' as const, managed: true, host: 'ferry@lvm-a#pool0', backendName: 'legacy-1', capacity: null };
    // Act
    await insertVolume({ ...base, id: '11111111-0000-4000-8000-000000000001' }, { claimBackendObject: true });
    const second = await insertVolume({ ...base, id: '11111111-0000-4000-8000-000000000002' }, { claimBackendObject: true }).catch((e: Error) => e);
    // Assess
    expect(second).toBeInstanceOf(BadRequest);
    expect((second as Error).message).toBe('Invalid volume: Backend object legacy-1 on ferry@lvm-a is already managed by volume 11111111-0000-4000-8000-000000000001.');
    expect(await getVolume('11111111-0000-4000-8000-000000000002')).toBeUndefined();
  });

  test('seeding twice changes nothing', async () => {
    const before = await getVolumeTypeByName('multiattach');
    await seedVolumeSandbox({ dataDir });
    expect(await getVolumeTypeByName('multiattach')).toEqual(before);
    expect(before.extraSpecs).toEqual({ multiattach: '<is> True' });
  });
});

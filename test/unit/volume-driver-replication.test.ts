import { mkdir, mkdtemp, readlink, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { BackendConfig, ReplicatedVolumeRef } from '../../functions/drivers/volume/driver.js';
import { InvalidReplicationTarget, LocalVolumeDriver, connectionPath } from '../../functions/drivers/volume/local.js';
import { replicationEngineFor } from '../../functions/drivers/volume/local-replication.js';
import { REPLICATION_CHUNK_BYTES } from '../../functions/drivers/volume/sparse-copy.js';
import { replicationDecision, startReplicationLoop } from '../../infra/local/replicator.js';
import type { BackendLag } from '../../functions/drivers/volume/replication-lag.js';
import { clearDriverCache, driverFor, replicationDriverFor } from '../../functions/drivers/volume/registry.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { readAt, writeAt } from '../support/files.js';
import { replicatedLocalBackend } from '../support/local-backends.js';
import { eventually } from '../support/poll.js';

const MIB = 1024 * 1024;
const VOLUME_BYTES = 64 * MIB;

let base: string;
let primaryRoot: string;
let siteB: string;
let siteC: string;
let config: BackendConfig;
let primary: LocalVolumeDriver;

const volume = (name: string): ReplicatedVolumeRef => ({ volumeId: `id-${name}`, backendName: name, sizeGb: 1 });


const primaryFile = (name: string) => join(primaryRoot, 'pool0', name);
const replicaFile = (site: string, name: string) => join(site, 'pool0', name);

/**
 * A replicated volume with `data` at `offset`, its initial copy made. The file is made directly at
 * 64 MiB (the driver takes any file in a pool as a volume): reading a cold 1 GiB of holes costs the
 * kernel about a second, which would make these tests slow without testing anything more.
 */
async function replicatedVolume(name: string, data = 'A-bytes', offset = 5 * MIB): Promise<void> {
  await mkdir(join(primaryRoot, 'pool0'), { recursive: true });
  await writeFile(primaryFile(name), '');
  await truncate(primaryFile(name), VOLUME_BYTES);
  await writeAt(primaryFile(name), offset, data);
  await primary.enableReplication(name);
}

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'ferry-replication-'));
  primaryRoot = join(base, 'primary');
  siteB = join(base, 'site-b');
  siteC = join(base, 'site-c');
  for (const dir of [primaryRoot, siteB, siteC]) await mkdir(dir);
  config = replicatedLocalBackend(primaryRoot, { 'site-b': siteB, 'site-c': siteC });
  primary = new LocalVolumeDriver(config);
});

afterEach(async () => {
  clearFaults();
  clearDriverCache();
  await rm(base, { recursive: true, force: true });
});

describe('configuration and capabilities', () => {
  it('refuses a replication_device named default or without a root', () => {
    // Act / Assess
    expect(() => new LocalVolumeDriver({ ...config, replicationDevices: [{ backend_id: 'default', root: siteB }] })).toThrow(/must not be "default"/);
    expect(() => new LocalVolumeDriver({ ...config, replicationDevices: [{ backend_id: 'site-b' }] })).toThrow(DriverError);
  });

  it('reports the targets as replication capabilities', async () => {
    // Act
    const caps = await primary.capabilities();
    const plain = await new LocalVolumeDriver({ ...config, replicationDevices: undefined }).capabilities();

    // Assess
    expect(primary.replicationTargets()).toEqual(['site-b', 'site-c']);
    expect(caps[0]).toMatchObject({ replicationEnabled: true, replicationTargets: ['site-b', 'site-c'], replicationCount: 2, replicationType: ['async'] });
    expect(plain[0]).toMatchObject({ replicationEnabled: false, replicationTargets: [], replicationCount: 0 });
  });
});

describe('asynchronous replication', () => {
  it('enableReplication registers the volume and copies it in full to every target, sparse', async () => {
    // Act
    await replicatedVolume('vol-1', 'initial');

    // Assess
    expect(existsSync(join(primaryRoot, '.replication', 'vol-1'))).toBe(true);
    for (const site of [siteB, siteC]) {
      const st = await stat(replicaFile(site, 'vol-1'));
      expect(st.size).toBe(VOLUME_BYTES);
      expect(st.blocks * 512).toBeLessThan(8 * MIB);
      expect(await readAt(replicaFile(site, 'vol-1'), 5 * MIB, 7)).toBe('initial');
    }
  });

  it('a new 1 GiB volume from createVolume gets a sparse replica of its size', async () => {
    // Prepare
    await primary.createVolume({ backendName: 'vol-new', sizeGb: 1, pool: 'pool0' });

    // Act
    await primary.enableReplication('vol-new');
    const status = await primary.replicationStatus('vol-new');

    // Assess
    const st = await stat(replicaFile(siteB, 'vol-new'));
    expect(st.size).toBe(1024 * MIB);
    expect(st.blocks).toBe(0);
    expect(status.map((s) => ({ lagMs: s.lagMs, bytesCopied: s.bytesCopied }))).toEqual([
      { lagMs: 0, bytesCopied: 0 },
      { lagMs: 0, bytesCopied: 0 },
    ]);
  });

  it('writes only the changed chunk: one byte in a volume copies one chunk per target', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await writeAt(primaryFile('vol-1'), 40 * MIB + 3, 'x');

    // Act
    const report = await primary.syncNow();
    const status = await primary.replicationStatus('vol-1');

    // Assess
    expect(report.errors).toEqual([]);
    expect(report.bytesCopied).toBe(2 * REPLICATION_CHUNK_BYTES);
    expect(status.map((s) => s.bytesCopied)).toEqual([REPLICATION_CHUNK_BYTES, REPLICATION_CHUNK_BYTES]);
    expect(await readAt(replicaFile(siteB, 'vol-1'), 40 * MIB + 3, 1)).toBe('x');
    expect(await readAt(replicaFile(siteC, 'vol-1'), 5 * MIB, 7)).toBe('A-bytes');
  });

  it('copies nothing when nothing changed', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await primary.syncNow();

    // Act
    const report = await primary.syncNow();

    // Assess
    expect(report.volumes).toBe(1);
    expect(report.bytesCopied).toBe(0);
  });

  it('keeps the replica sparse where the source has holes', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await writeAt(primaryFile('vol-1'), 50 * MIB, Buffer.alloc(MIB, 7));

    // Act
    await primary.syncNow();

    // Assess
    const st = await stat(replicaFile(siteB, 'vol-1'));
    expect(st.size).toBe(VOLUME_BYTES);
    expect(st.blocks * 512).toBeLessThan(8 * MIB);
    expect((await readAt(replicaFile(siteB, 'vol-1'), 50 * MIB, 4)).split('')).toEqual(['\x07', '\x07', '\x07', '\x07']);
  });

  it('follows an extended volume', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await truncate(primaryFile('vol-1'), 2 * VOLUME_BYTES);
    await writeAt(primaryFile('vol-1'), VOLUME_BYTES + 7, 'grown');

    // Act
    await primary.syncNow();

    // Assess
    expect((await stat(replicaFile(siteB, 'vol-1'))).size).toBe(2 * VOLUME_BYTES);
    expect(await readAt(replicaFile(siteB, 'vol-1'), VOLUME_BYTES + 7, 5)).toBe('grown');
  });

  it('measures lag: positive after a write, 0 after a sync', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    const synced = await primary.replicationStatus('vol-1');
    await writeAt(primaryFile('vol-1'), 0, 'new');

    // Act
    const behind = await primary.replicationStatus('vol-1');
    await primary.syncNow();
    const after = await primary.replicationStatus('vol-1');

    // Assess
    expect(synced.map((s) => s.lagMs)).toEqual([0, 0]);
    expect(behind.every((s) => s.lagMs > 0)).toBe(true);
    expect(after.map((s) => s.lagMs)).toEqual([0, 0]);
    expect(after[0].lastSyncAt).toBeGreaterThanOrEqual(synced[0].lastSyncAt!);
  });

  it('mirrors host connections to the targets', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await primary.initializeConnection('vol-1', { host: 'compute-1' });

    // Act
    await primary.syncNow();
    await primary.terminateConnection('vol-1', { host: 'compute-1' });
    await primary.initializeConnection('vol-1', { host: 'compute-2' });
    await primary.syncNow();

    // Assess
    expect(existsSync(connectionPath(config, 'compute-1', 'vol-1', 'site-b'))).toBe(false);
    expect(await readlink(connectionPath(config, 'compute-2', 'vol-1', 'site-b'))).toBe('../../pool0/vol-1');
  });

  it('a missing target fails its copies but the pass goes on with the others', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await rm(siteC, { recursive: true });
    await writeAt(primaryFile('vol-1'), 0, 'still');

    // Act
    const report = await primary.syncNow();

    // Assess
    expect(report.errors).toEqual([expect.objectContaining({ backendName: 'vol-1', targetBackendId: 'site-c' })]);
    expect(await readAt(replicaFile(siteB, 'vol-1'), 0, 5)).toBe('still');
    expect(existsSync(siteC)).toBe(false);
  });

  it('disableReplication removes the marker and every replica', async () => {
    // Prepare
    await replicatedVolume('vol-1');

    // Act
    await primary.disableReplication('vol-1');
    await primary.disableReplication('vol-1');
    const report = await primary.syncNow();

    // Assess
    expect(report.volumes).toBe(0);
    expect(existsSync(replicaFile(siteB, 'vol-1'))).toBe(false);
    expect(existsSync(join(primaryRoot, '.replication', 'vol-1'))).toBe(false);
    expect(existsSync(primaryFile('vol-1'))).toBe(true);
  });

  it('deleting a replicated volume deletes its replicas', async () => {
    // Prepare
    await replicatedVolume('vol-1');

    // Act
    await primary.deleteVolume('vol-1');

    // Assess
    expect(existsSync(primaryFile('vol-1'))).toBe(false);
    expect(existsSync(replicaFile(siteB, 'vol-1'))).toBe(false);
    expect(existsSync(replicaFile(siteC, 'vol-1'))).toBe(false);
  });

  it('the stack loop replicates without being asked and stops cleanly', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await writeAt(primaryFile('vol-1'), 0, 'by-loop');

    // Act
    const recorded: { host: string; lag: BackendLag }[] = [];
    const loop = startReplicationLoop({ intervalMs: 5, backends: async () => [{ config, activeBackendId: '' }], recordLag: async (host, lag) => recorded.push({ host, lag }) });
    await eventually(async (note) => note(await readAt(replicaFile(siteB, 'vol-1'), 0, 7)) === 'by-loop' || undefined, 'the loop to copy the write to site B', { timeoutMs: 20_000, intervalMs: 20 });
    await loop.stop();

    // Assess: the replica, and each pass's lag handed on (one volume, replicated on both targets).
    expect(await readAt(replicaFile(siteC, 'vol-1'), 0, 7)).toBe('by-loop');
    const last = recorded.at(-1)!;
    expect(last.host).toBe(config.host);
    expect(last.lag.targets.map((t) => [t.targetBackendId, t.volumes, t.replicated])).toEqual([
      ['site-b', 1, 1],
      ['site-c', 1, 1],
    ]);
    expect(last.lag.targets.every((t) => t.maxLagMs !== null && t.maxLagMs >= 0)).toBe(true);
  });
});

describe('the stack loop follows the service state', () => {
  it('replicates only a local replicated backend that is enabled on its primary', () => {
    // Act / Assess
    expect(replicationDecision({ config, activeBackendId: '', replicationStatus: 'enabled' })).toBe('sync-clearing-stale-promotion');
    expect(replicationDecision({ config, activeBackendId: '' })).toBe('sync');
    expect(replicationDecision({ config, activeBackendId: '', replicationStatus: 'failing-over' })).toBe('skip');
    expect(replicationDecision({ config, activeBackendId: 'site-b', replicationStatus: 'failed-over' })).toBe('skip');
    expect(replicationDecision({ config, activeBackendId: '', replicationStatus: 'failover-error' })).toBe('skip');
    expect(replicationDecision({ config: { ...config, replicationDevices: [] }, activeBackendId: '', replicationStatus: 'enabled' })).toBe('skip');
    expect(replicationDecision({ config: { ...config, driver: 'aws-ebs' }, activeBackendId: '', replicationStatus: 'enabled' })).toBe('skip');
  });

  it('a promoted marker left behind is cleared once the service is enabled on the primary again', async () => {
    // Prepare: a failover whose target was picked (and promoted) but which never moved any volume.
    await replicatedVolume('vol-1', 'v1');
    await primary.failoverHost([], null);
    await writeAt(primaryFile('vol-1'), 5 * MIB, 'v2');
    const blocked = await primary.syncNow();

    // Act
    const report = await replicationEngineFor(config).syncAll('', { promotionIsStale: true });

    // Assess
    expect(blocked.skipped).toMatch(/site-b/);
    expect(report.skipped).toBeUndefined();
    expect(await readAt(replicaFile(siteB, 'vol-1'), 5 * MIB, 2)).toBe('v2');
  });
});

describe('failover', () => {
  it('smoking hole: the target holds the last completed sync, not later writes', async () => {
    // Prepare
    await replicatedVolume('vol-1', 'AAAA');
    await writeAt(primaryFile('vol-1'), 5 * MIB, 'BBBB');
    await rm(primaryRoot, { recursive: true, force: true });

    // Act
    const result = await primary.failoverHost([volume('vol-1')], null);

    // Assess
    expect(result).toEqual({
      activeBackendId: 'site-b',
      volumeUpdates: [{ volumeId: 'id-vol-1', updates: { replicationStatus: 'failed-over', providerLocation: replicaFile(siteB, 'vol-1') } }],
    });
    expect(await readAt(replicaFile(siteB, 'vol-1'), 5 * MIB, 4)).toBe('AAAA');
  });

  it('a volume without a replica gets an error update', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await primary.createVolume({ backendName: 'plain', sizeGb: 1, pool: 'pool0' });

    // Act
    const result = await primary.failoverHost([volume('vol-1'), volume('plain')], 'site-c');

    // Assess
    expect(result.activeBackendId).toBe('site-c');
    expect(result.volumeUpdates).toEqual([
      { volumeId: 'id-vol-1', updates: { replicationStatus: 'failed-over', providerLocation: replicaFile(siteC, 'vol-1') } },
      { volumeId: 'id-plain', updates: { status: 'error' } },
    ]);
  });

  it('refuses an unknown target and a failback while on the primary with InvalidReplicationTarget', async () => {
    // Act
    const unknown = await primary.failoverHost([], 'site-z').catch((e: unknown) => e);
    const failback = await primary.failoverHost([], 'default').catch((e: unknown) => e);

    // Assess
    for (const e of [unknown, failback]) {
      expect(e).toBeInstanceOf(InvalidReplicationTarget);
      expect((e as InvalidReplicationTarget).status).toBe(400);
      expect((e as Error).name).toBe('InvalidReplicationTarget');
      expect((e as Error).message).toMatch(/^Invalid Replication Target: /);
    }
  });

  it('is idempotent: the same call twice gives the same result', async () => {
    // Prepare
    await replicatedVolume('vol-1');

    // Act
    const first = await primary.failoverHost([volume('vol-1'), volume('gone')], 'site-b');
    const second = await primary.failoverHost([volume('vol-1'), volume('gone')], 'site-b');

    // Assess
    expect(second).toEqual(first);
  });

  it('stops replication into the promoted target even from a driver still on the primary', async () => {
    // Prepare
    await replicatedVolume('vol-1', 'before');
    await primary.failoverHost([volume('vol-1')], 'site-b');
    await writeAt(primaryFile('vol-1'), 5 * MIB, 'stale!');

    // Act
    const report = await primary.syncNow();

    // Assess
    expect(report.skipped).toMatch(/failed over to site-b/);
    expect(await readAt(replicaFile(siteB, 'vol-1'), 5 * MIB, 6)).toBe('before');
  });

  it('afterwards the driver built for the target reads and writes the target site', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await primary.initializeConnection('vol-1', { host: 'compute-1' });
    await primary.syncNow();
    await rm(primaryRoot, { recursive: true, force: true });
    const { activeBackendId } = await primary.failoverHost([volume('vol-1')], null);
    const onTarget = new LocalVolumeDriver(config, { activeBackendId });

    // Act
    const created = await onTarget.createVolume({ backendName: 'vol-new', sizeGb: 1, pool: 'pool0' });
    const conn = await onTarget.initializeConnection('vol-1', { host: 'compute-2' });

    // Assess
    expect(created.providerLocation).toBe(replicaFile(siteB, 'vol-new'));
    expect(conn.data.device_path).toBe(join(siteB, '.connections', 'compute-2', 'vol-1'));
    expect((await onTarget.listVolumes()).map((v) => v.backendName).sort()).toEqual(['vol-1', 'vol-new']);
    expect((await onTarget.listConnections()).sort((a, b) => a.host.localeCompare(b.host))).toEqual([
      { backendName: 'vol-1', host: 'compute-1' },
      { backendName: 'vol-1', host: 'compute-2' },
    ]);
    expect(existsSync(primaryRoot)).toBe(false);
  });

  it('fails back: the primary is recreated with the target’s newer bytes and replication resumes', async () => {
    // Prepare
    await replicatedVolume('vol-1', 'old-bytes');
    await rm(primaryRoot, { recursive: true, force: true });
    const { activeBackendId } = await primary.failoverHost([volume('vol-1')], 'site-b');
    const onTarget = new LocalVolumeDriver(config, { activeBackendId });
    await onTarget.initializeConnection('vol-1', { host: 'compute-9' });
    await writeAt(replicaFile(siteB, 'vol-1'), 5 * MIB, 'new-bytes');

    // Act
    const result = await onTarget.failoverHost([volume('vol-1')], 'default');
    const back = new LocalVolumeDriver(config, { activeBackendId: result.activeBackendId });
    await writeAt(primaryFile('vol-1'), 0, 'after');
    const report = await back.syncNow();

    // Assess
    expect(result).toEqual({
      activeBackendId: '',
      volumeUpdates: [{ volumeId: 'id-vol-1', updates: { replicationStatus: 'enabled', providerLocation: primaryFile('vol-1') } }],
    });
    expect(await readAt(primaryFile('vol-1'), 5 * MIB, 9)).toBe('new-bytes');
    expect(await back.listConnections()).toEqual([{ backendName: 'vol-1', host: 'compute-9' }]);
    expect(report.skipped).toBeUndefined();
    expect(await readAt(replicaFile(siteB, 'vol-1'), 0, 5)).toBe('after');
    expect(await readAt(replicaFile(siteC, 'vol-1'), 5 * MIB, 9)).toBe('new-bytes');
  });

  it('freeze and thaw record a marker, idempotently', async () => {
    // Act
    await primary.freezeBackend();
    await primary.freezeBackend();
    const frozen = await primary.isFrozen();
    await primary.thawBackend();
    await primary.thawBackend();

    // Assess
    expect(frozen).toBe(true);
    expect(await primary.isFrozen()).toBe(false);
  });
});

describe('drills', () => {
  it('brings up copies of the replicas on the target and removes them, leaving primary and replicas alone', async () => {
    // Prepare
    await replicatedVolume('vol-1', 'drill-me');
    await writeAt(primaryFile('vol-1'), 5 * MIB, 'unsynced');
    const primaryBefore = await stat(primaryFile('vol-1'));
    const replicaBefore = await stat(replicaFile(siteB, 'vol-1'));

    // Act
    const copies = await primary.startDrill([volume('vol-1'), volume('no-replica')], 'site-b');
    const again = await primary.startDrill([volume('vol-1')], 'site-b');
    const copyBytes = await readAt(copies[0].location, 5 * MIB, 8);
    await writeAt(copies[0].location, 5 * MIB, 'scribble');
    await primary.endDrill(copies);
    await primary.endDrill(copies);

    // Assess
    expect(copies).toEqual([{ volumeId: 'id-vol-1', backendName: 'vol-1', targetBackendId: 'site-b', location: join(siteB, '.drill', 'vol-1') }]);
    expect(again).toEqual(copies);
    expect(copyBytes).toBe('drill-me');
    expect(existsSync(copies[0].location)).toBe(false);
    expect(await readAt(replicaFile(siteB, 'vol-1'), 5 * MIB, 8)).toBe('drill-me');
    expect(await readAt(primaryFile('vol-1'), 5 * MIB, 8)).toBe('unsynced');
    expect((await stat(primaryFile('vol-1'))).mtimeMs).toBe(primaryBefore.mtimeMs);
    expect((await stat(replicaFile(siteB, 'vol-1'))).mtimeMs).toBe(replicaBefore.mtimeMs);
  });

  it('refuses an unknown target', async () => {
    // Act / Assess
    await expect(primary.startDrill([volume('vol-1')], 'site-z')).rejects.toBeInstanceOf(InvalidReplicationTarget);
  });
});

describe('registry', () => {
  it('gives replicated local backends as ReplicationDriver and fault injection reaches the new methods', async () => {
    // Prepare
    const driver = driverFor(config);
    injectFault({ kind: 'volume', backend: config.host, method: 'failoverHost', mode: 'fail', times: 1 });

    // Act
    const replicating = replicationDriverFor(driver);
    const attempt = await replicating!.failoverHost([], 'site-b').catch((e: unknown) => e);
    const retry = await replicating!.failoverHost([], 'site-b');

    // Assess
    expect(replicationDriverFor(driverFor({ ...config, host: 'ferry@plain', replicationDevices: [] }))).toBeUndefined();
    expect(attempt).toBeInstanceOf(DriverError);
    expect((attempt as Error).message).toBe('injected fault: volume.failoverHost on ferry@rep');
    expect(retry.activeBackendId).toBe('site-b');
  });

  it('builds the driver for the active backend id on the target root', async () => {
    // Act
    const driver = driverFor(config, 'site-c');
    const created = await driver.createVolume({ backendName: 'vol-c', sizeGb: 1, pool: 'pool0' });

    // Assess
    expect(created.providerLocation).toBe(replicaFile(siteC, 'vol-c'));
  });
});

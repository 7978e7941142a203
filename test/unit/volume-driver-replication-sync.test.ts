/**
 * The local volume driver's asynchronous replication (replication_device targets on other roots):
 * configuration and capabilities, the full then chunk-wise sparse copies to every target, extend,
 * lag, host connections mirrored, a missing target, disable and delete, and the stack's replication
 * loop following the service state. Failover, failback, freeze, drills and the registry:
 * volume-driver-replication-failover.test.ts.
 */
import { readlink, rm, stat, truncate } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import { LocalVolumeDriver, connectionPath } from '../../functions/drivers/volume/local.js';
import { replicationEngineFor } from '../../functions/drivers/volume/local-replication.js';
import { REPLICATION_CHUNK_BYTES } from '../../functions/drivers/volume/sparse-copy.js';
import { replicationDecision, startReplicationLoop } from '../../infra/local/replicator.js';
import type { BackendLag } from '../../functions/drivers/volume/replication-lag.js';
import { readAt, writeAt } from '../support/files.js';
import { eventually } from '../support/poll.js';
import { MIB, VOLUME_BYTES, primaryRoot, siteB, siteC, config, primary, volume, primaryFile, replicaFile, replicatedVolume, useReplicationSites } from '../support/local-replication-sites.js';

useReplicationSites();

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

/**
 * The local volume driver's replication failover (smoking hole: the last completed sync; no replica;
 * refusals; idempotency; replication stopped into the promoted target; the driver on the target),
 * failback, freeze/thaw, drills, and the registry's replication drivers. The replication itself:
 * volume-driver-replication-sync.test.ts.
 */
import { mkdir, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import { InvalidReplicationTarget, LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { driverFor, replicationDriverFor } from '../../functions/drivers/volume/registry.js';
import { injectFault } from '../../functions/core/faults.js';
import { readReplicationMarker, replicationMarkerPath } from '../../functions/drivers/volume/local-sites.js';
import { readAt, writeAt } from '../support/files.js';
import { MIB, primaryRoot, siteB, siteC, config, primary, volume, primaryFile, replicaFile, replicatedVolume, useReplicationSites } from '../support/local-replication-sites.js';

useReplicationSites();

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

  it('discardFailedOver (a volume deleted during its failover) removes its replica and marker from the target, twice alike, and nothing of the others', async () => {
    // Prepare
    await replicatedVolume('vol-1');
    await replicatedVolume('vol-2');
    const [one] = (await primary.failoverHost([volume('vol-1'), volume('vol-2')], 'site-b')).volumeUpdates;

    // Act
    const discarded = { volumeId: 'id-vol-1', backendName: 'vol-1', targetBackendId: 'site-b', location: one!.updates.providerLocation! };
    await primary.discardFailedOver([discarded]);
    await primary.discardFailedOver([discarded]);

    // Assess
    expect(existsSync(replicaFile(siteB, 'vol-1'))).toBe(false);
    expect(existsSync(replicationMarkerPath(siteB, 'vol-1'))).toBe(false);
    expect(existsSync(replicaFile(siteB, 'vol-2'))).toBe(true);
    expect(existsSync(replicationMarkerPath(siteB, 'vol-2'))).toBe(true);
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

  it('registers each failed-over volume on the target (one kept when there), and a marker a crash left empty still counts', async () => {
    // Prepare: vol-2's marker on the target is already there, vol-3's as a crash after its create
    // and before its bytes would leave it (writeReplicationMarkers fsyncs the directory, not each file).
    for (const name of ['vol-1', 'vol-2', 'vol-3']) await replicatedVolume(name);
    await mkdir(join(siteB, '.replication'), { recursive: true });
    await writeFile(join(siteB, '.replication', 'vol-2'), JSON.stringify({ backendName: 'vol-2', enabledAt: 42 }));
    await writeFile(join(siteB, '.replication', 'vol-3'), '');

    // Act
    const result = await primary.failoverHost(['vol-1', 'vol-2', 'vol-3'].map(volume), 'site-b');

    // Assess
    expect(result.volumeUpdates.map((u) => u.updates.replicationStatus)).toEqual(['failed-over', 'failed-over', 'failed-over']);
    expect(await readReplicationMarker(siteB, 'vol-1')).toMatchObject({ backendName: 'vol-1', enabledAt: expect.any(Number) });
    expect(await readReplicationMarker(siteB, 'vol-2')).toEqual({ backendName: 'vol-2', enabledAt: 42 });
    expect(await readReplicationMarker(siteB, 'vol-3')).toEqual({});
    expect(await readReplicationMarker(siteC, 'vol-1')).toBeUndefined();
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


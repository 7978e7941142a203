/**
 * The replication driver contract (seed 001, reference §2; functions/drivers/volume/driver.ts
 * ReplicationDriver), run against every volume driver that replicates: the local driver on
 * directories, the aws-ebs driver on mocked regions. Each driver brings its own way of making
 * replicas arrive (`replicate`) and of losing its primary site; the rules are the same:
 * targets in configuration order; failover(null) picks the first; an unknown target is
 * InvalidReplicationTarget and changes nothing; a volume with no replica goes to error instead of
 * failing the call; nothing is read from a lost primary; a repeated failover makes nothing twice;
 * failback brings the volumes home; a drill leaves the primary alone and its end removes its copies;
 * disable removes a volume's replicas; a transfer refused as throttled is reported for its volume
 * and made by a later pass; a target whose transfers do not arrive falls behind (its lag grows, no
 * pile of transfers in flight) while the others keep up.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BackendNotReady } from '../../functions/core/errors.js';
import { InvalidReplicationTarget, type FailoverResult, type ReplicatedVolumeRef, type ReplicationDriver, type VolumeDriver } from '../../functions/drivers/volume/driver.js';

export type ReplicatingDriver = VolumeDriver &
  ReplicationDriver & {
    /** Per target: when the newest arrived replica was taken (null: none yet) and the lag that makes (both drivers' replicationStatus). */
    replicationStatus(backendName: string): Promise<{ targetBackendId: string; lastSyncAt: number | null; lagMs: number }[]>;
  };

export interface ReplicationDriverUnderTest {
  /** The backend's driver with this active backend id ('' the primary, or a target after failover). */
  on(activeBackendId: string): ReplicatingDriver;
  /** The configured targets, in order (at least two). */
  targets: string[];
  pool: string;
  /** Size of the volumes the cases make (the smallest the driver's kind takes). */
  sizeGb: number;
  /** Runs the driver's replication (the stack's loop or schedule) until every replicated volume's replicas have arrived. */
  replicate(): Promise<void>;
  /** One replication pass (one tick of the stack's loop or schedule): the volumes it could not replicate. */
  pass(): Promise<{ errors: { backendName: string; message: string }[] }>;
  /** What `advance` waits: a mocked clock's step, or a short real wait for a driver on the real clock. */
  tickMs: number;
  /** Time passes (tickMs) before the next pass. */
  advance(): Promise<void>;
  /** The next transfer to `target` is refused as throttled; the ones after go through (aws-ebs: CopySnapshot answers RequestLimitExceeded once, as EC2 does past its request rate). */
  throttleNextTransfer(target: string): Promise<void>;
  /** Transfers to `target` start but never arrive (aws-ebs: its copies stay `pending`, as a large cross-region CopySnapshot does for hours). */
  slowDown(target: string): Promise<void>;
  /** Transfers of the volume to `target` started and not arrived. */
  inFlight(target: string, backendName: string): Promise<number>;
  /** The primary site stops answering (a smoking hole), and comes back. */
  losePrimary(): Promise<void>;
  restorePrimary(): Promise<void>;
  cleanup?: () => Promise<void>;
}

/** Calls a failover until the driver stops answering BackendNotReady (the machine's wait between tries). */
async function settled(call: () => Promise<FailoverResult>): Promise<FailoverResult> {
  for (let i = 0; i < 20; i++) {
    try {
      return await call();
    } catch (e) {
      if (!(e instanceof BackendNotReady)) throw e;
    }
  }
  throw new Error('the driver was still not ready after 20 tries');
}

export function describeReplicationDriverContract(name: string, make: () => Promise<ReplicationDriverUnderTest>): void {
  describe(`replication driver contract: ${name}`, () => {
    let t: ReplicationDriverUnderTest;
    const ref = (backendName: string): ReplicatedVolumeRef => ({ volumeId: `id-${backendName}`, backendName, sizeGb: t.sizeGb });
    async function replicated(...names: string[]): Promise<void> {
      for (const n of names) {
        await t.on('').createVolume({ backendName: n, sizeGb: t.sizeGb, pool: t.pool });
        await t.on('').enableReplication(n);
      }
      await t.replicate();
    }

    beforeEach(async () => {
      t = await make();
    });
    afterEach(async () => {
      await t.cleanup?.();
    });

    it('lists its targets in configuration order and reports them in its pools', async () => {
      // Act
      const pools = await t.on('').capabilities();

      // Assess
      expect(t.on('').replicationTargets()).toEqual(t.targets);
      expect(pools[0]).toMatchObject({ replicationEnabled: true, replicationTargets: t.targets, replicationCount: t.targets.length, replicationType: ['async'] });
    });

    it('failover(null) goes to the first target; each replica becomes the volume there under its name; a repeat makes nothing twice', async () => {
      // Prepare
      await replicated('volume-f1', 'volume-f2');

      // Act
      const first = await t.on('').failoverHost([ref('volume-f1'), ref('volume-f2')], null);
      const again = await t.on('').failoverHost([ref('volume-f1'), ref('volume-f2')], t.targets[0]!);

      // Assess
      expect(first.activeBackendId).toBe(t.targets[0]);
      expect(first.volumeUpdates.map((u) => [u.volumeId, u.updates.replicationStatus])).toEqual([
        ['id-volume-f1', 'failed-over'],
        ['id-volume-f2', 'failed-over'],
      ]);
      expect(again).toEqual(first);
      const there = t.on(t.targets[0]!);
      expect(await there.getVolume('volume-f1')).toEqual({ backendName: 'volume-f1', sizeGb: t.sizeGb });
      expect((await there.listVolumes()).map((v) => v.backendName).sort()).toEqual(['volume-f1', 'volume-f2']);
    });

    it('an unknown target is InvalidReplicationTarget; failing back while on the primary too', async () => {
      // Prepare
      await replicated('volume-u1');
      const sites = async () => Promise.all(['', ...t.targets].map((site) => t.on(site).listVolumes()));
      const before = await sites();

      // Act / Assess
      await expect(t.on('').failoverHost([ref('volume-u1')], 'nowhere')).rejects.toBeInstanceOf(InvalidReplicationTarget);
      await expect(t.on('').failoverHost([ref('volume-u1')], 'default')).rejects.toBeInstanceOf(InvalidReplicationTarget);
      expect(await sites()).toEqual(before);
    });

    it('with the primary gone: replicated volumes fail over, one never replicated goes to error', async () => {
      // Prepare
      await replicated('volume-s1');
      await t.on('').createVolume({ backendName: 'volume-s2', sizeGb: t.sizeGb, pool: t.pool });
      await t.losePrimary();

      // Act
      const result = await t.on('').failoverHost([ref('volume-s1'), ref('volume-s2')], t.targets[1]!);

      // Assess
      await t.restorePrimary();
      expect(result.activeBackendId).toBe(t.targets[1]);
      expect(result.volumeUpdates).toEqual([
        { volumeId: 'id-volume-s1', updates: expect.objectContaining({ replicationStatus: 'failed-over' }) },
        { volumeId: 'id-volume-s2', updates: { status: 'error' } },
      ]);
    });

    it('failback brings the volumes home and the backend runs on its primary again', async () => {
      // Prepare
      await replicated('volume-b1');
      await t.on('').failoverHost([ref('volume-b1')], t.targets[0]!);

      // Act
      const back = await settled(() => t.on(t.targets[0]!).failoverHost([ref('volume-b1')], 'default'));

      // Assess
      expect(back.activeBackendId).toBe('');
      expect(back.volumeUpdates).toEqual([{ volumeId: 'id-volume-b1', updates: expect.objectContaining({ replicationStatus: 'enabled' }) }]);
      expect(await t.on('').getVolume('volume-b1')).toEqual({ backendName: 'volume-b1', sizeGb: t.sizeGb });
    });

    it('a drill brings copies up on a target and leaves the primary alone; ending it twice is fine', async () => {
      // Prepare
      await replicated('volume-d1');
      const before = await t.on('').listVolumes();

      // Act
      const copies = await t.on('').startDrill([ref('volume-d1')], t.targets[0]!);
      await t.on('').endDrill(copies);
      await t.on('').endDrill(copies);

      // Assess
      expect(copies.map((c) => [c.volumeId, c.backendName, c.targetBackendId])).toEqual([['id-volume-d1', 'volume-d1', t.targets[0]]]);
      expect(await t.on('').listVolumes()).toEqual(before);
    });

    it('disable removes the volume\'s replicas: a failover then finds none', async () => {
      // Prepare
      await replicated('volume-x1');

      // Act
      await t.on('').disableReplication('volume-x1');
      await t.on('').disableReplication('volume-x1');
      await t.replicate();
      const result = await t.on('').failoverHost([ref('volume-x1')], t.targets[0]!);

      // Assess
      expect(result.volumeUpdates).toEqual([{ volumeId: 'id-volume-x1', updates: { status: 'error' } }]);
    });

    const statusOn = async (backendName: string, target: string) => (await t.on('').replicationStatus(backendName)).find((s) => s.targetBackendId === target)!;

    it('a transfer refused as throttled is reported for that volume and made by a later pass', async () => {
      // Prepare
      await replicated('volume-t1');
      const before = await statusOn('volume-t1', t.targets[1]!);
      await t.throttleNextTransfer(t.targets[1]!);

      // Act: passes until the next transfer to the target was tried (a pass reports it), then replication as usual.
      const errors = [];
      for (let i = 0; i < 4 && !errors.length; i++) {
        await t.advance();
        errors.push(...(await t.pass()).errors);
      }
      await t.replicate();
      const after = await t.pass();

      // Assess
      expect(errors).toEqual([expect.objectContaining({ backendName: 'volume-t1' })]);
      expect(after.errors).toEqual([]);
      expect((await statusOn('volume-t1', t.targets[1]!)).lastSyncAt).toBeGreaterThanOrEqual(before.lastSyncAt!);
      expect(await t.inFlight(t.targets[1]!, 'volume-t1')).toBeLessThanOrEqual(1);
    });

    it('falling behind: a target whose transfers do not arrive lags more with every pass, with at most one transfer in flight, while the other keeps up', async () => {
      // Prepare
      await replicated('volume-l1');
      await t.slowDown(t.targets[1]!);
      for (let i = 0; i < 3; i++) {
        await t.advance();
        await t.pass();
      }
      const first = await statusOn('volume-l1', t.targets[1]!);

      // Act
      for (let i = 0; i < 3; i++) {
        await t.advance();
        await t.pass();
      }

      // Assess
      const later = await statusOn('volume-l1', t.targets[1]!);
      expect(later.lagMs).toBeGreaterThanOrEqual(first.lagMs + 3 * t.tickMs);
      expect(later.lastSyncAt ?? 0).toBeLessThanOrEqual(first.lastSyncAt ?? 0);
      expect(await t.inFlight(t.targets[1]!, 'volume-l1')).toBeLessThanOrEqual(1);
      expect((await statusOn('volume-l1', t.targets[0]!)).lagMs).toBeLessThan(later.lagMs);
    });
  });
}

/**
 * The volume driver contract (docs/drivers.md, "Volume drivers"): what every VolumeDriver promises
 * the flows, whatever its backend. `describeVolumeDriverContract(name, makeDriver)` registers the
 * cases; test/unit/volume-driver-contract.test.ts runs them for every driver kind, and the AWS
 * drivers of the next issues run the same suite.
 *
 * Driver-specific behaviour (a local volume's bytes, the EC2 calls the aws-ebs driver sends) stays
 * in that driver's own test file; what is here holds for all of them.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { Connector, VolumeDriver } from '../../functions/drivers/volume/driver.js';
import { isReplicationDriver, isSnapshotDriver } from '../../functions/drivers/volume/registry.js';

/** Ways to make the backend misbehave once, for drivers whose backend is a remote API. */
export interface BackendFaults {
  /** The next call of `operation` is refused as throttled (nothing happens on the backend). */
  throttleNext(operation: 'CreateVolume'): void;
  /** The next call of `operation` does its work, but the caller sees a timeout instead of the reply. */
  loseNextReply(operation: 'CreateVolume'): void;
  /** Right after the next create, the backend does not know the new volume's id for a moment. */
  delayVisibilityOfNextCreate(): void;
}

export interface VolumeDriverUnderTest {
  driver: VolumeDriver;
  /** A pool of the driver's backend with room for a few 1-2 GiB volumes. */
  pool: string;
  /** Two different hosts the driver can connect a volume to. */
  connectors: [Connector, Connector];
  /** What the driver must declare. */
  declares: { driverVolumeType: string; snapshots: boolean; replication: boolean };
  faults?: BackendFaults;
  /**
   * Puts a small volume of this name on the backend for the snapshot cases, where a whole GiB would
   * make a driver copy a GiB (the local driver reads every hole of a sparse file); default: createVolume.
   */
  putSmallVolume?: (backendName: string) => Promise<void>;
  /**
   * Where the driver's own volumes cannot attach to two hosts at once (EBS outside io1/io2): a
   * driver of the same kind and backend whose multiattach volumes can, with the size it needs.
   * Default: the driver itself, volumes of 1 GiB created with `multiattach: true`.
   */
  multiattach?: { driver: VolumeDriver; pool: string; sizeGb: number };
  cleanup?: () => Promise<void>;
}

export function describeVolumeDriverContract(name: string, makeDriver: () => Promise<VolumeDriverUnderTest>): void {
  describe(`volume driver contract: ${name}`, () => {
    let t: VolumeDriverUnderTest;
    let driver: VolumeDriver;
    const create = (backendName: string, sizeGb = 1) => driver.createVolume({ backendName, sizeGb, pool: t.pool });
    const names = async () => (await driver.listVolumes()).map((v) => v.backendName).sort();

    beforeEach(async () => {
      t = await makeDriver();
      driver = t.driver;
    });
    afterEach(async () => {
      await t.cleanup?.();
    });

    describe('declared capabilities', () => {
      it('declares its driver_volume_type, and every connection_info carries it', async () => {
        // Prepare
        await create('volume-c1');

        // Act
        const connection = await driver.initializeConnection('volume-c1', t.connectors[0]);

        // Assess
        expect(driver.driverVolumeType).toBe(t.declares.driverVolumeType);
        expect(connection.driverVolumeType).toBe(driver.driverVolumeType);
      });

      it('declares snapshots and replication by the interfaces it implements, and reports its pools', async () => {
        // Act
        const pools = await driver.capabilities();

        // Assess
        expect(isSnapshotDriver(driver)).toBe(t.declares.snapshots);
        expect(isReplicationDriver(driver)).toBe(t.declares.replication);
        expect(pools.map((p) => p.pool)).toContain(t.pool);
        for (const p of pools) {
          expect(p.freeCapacityGb).toBeGreaterThanOrEqual(0);
          expect(p.freeCapacityGb).toBeLessThanOrEqual(p.totalCapacityGb);
          expect(p.replicationEnabled ?? false).toBe(false);
        }
      });
    });

    describe('create, extend, delete under a retried name', () => {
      it('create retried with the same name and size gives the same volume, once', async () => {
        // Act
        const first = await create('volume-r1', 2);
        const retried = await create('volume-r1', 2);

        // Assess
        expect(retried.providerLocation).toBe(first.providerLocation);
        expect(await names()).toEqual(['volume-r1']);
        expect(await driver.getVolume('volume-r1')).toEqual({ backendName: 'volume-r1', sizeGb: 2 });
      });

      it('create of an existing name with another size is a DriverError and changes nothing', async () => {
        // Prepare
        await create('volume-r2', 1);

        // Act
        const attempt = create('volume-r2', 2);

        // Assess
        await expect(attempt).rejects.toBeInstanceOf(DriverError);
        expect((await driver.getVolume('volume-r2'))?.sizeGb).toBe(1);
      });

      it('extend retried with the same size succeeds; shrinking is a DriverError', async () => {
        // Prepare
        await create('volume-r3', 1);

        // Act
        await driver.extendVolume('volume-r3', 2);
        await driver.extendVolume('volume-r3', 2);
        const shrink = driver.extendVolume('volume-r3', 1);

        // Assess
        await expect(shrink).rejects.toBeInstanceOf(DriverError);
        expect((await driver.getVolume('volume-r3'))?.sizeGb).toBe(2);
      });

      it('delete retried succeeds, and the volume is gone from reads and listings', async () => {
        // Prepare
        await create('volume-r4');
        await create('volume-r5');

        // Act
        await driver.deleteVolume('volume-r4');
        await driver.deleteVolume('volume-r4');

        // Assess
        expect(await driver.getVolume('volume-r4')).toBeUndefined();
        expect(await names()).toEqual(['volume-r5']);
      });
    });

    describe('NotFound: something absent', () => {
      it('reads as undefined, deletes as success, and cannot be extended or connected (DriverError)', async () => {
        // Act / Assess
        expect(await driver.getVolume('volume-absent')).toBeUndefined();
        await expect(driver.deleteVolume('volume-absent')).resolves.toBeUndefined();
        await expect(driver.extendVolume('volume-absent', 2)).rejects.toBeInstanceOf(DriverError);
        await expect(driver.initializeConnection('volume-absent', t.connectors[0])).rejects.toBeInstanceOf(DriverError);
        expect(await driver.listVolumes()).toEqual([]);
      });

      it('disconnecting a host that is not connected succeeds', async () => {
        // Prepare
        await create('volume-n1');

        // Act / Assess
        await expect(driver.terminateConnection('volume-n1', t.connectors[0])).resolves.toBeUndefined();
        await expect(driver.terminateConnection('volume-absent', t.connectors[0])).resolves.toBeUndefined();
      });
    });

    describe('connections for an attachment', () => {
      it('initialize retried returns the same properties; one connection per (volume, host)', async () => {
        // Prepare
        await create('volume-a1');

        // Act
        const first = await driver.initializeConnection('volume-a1', t.connectors[0]);
        const retried = await driver.initializeConnection('volume-a1', t.connectors[0]);

        // Assess: the same connection; only `pending` may differ (the backend finished the first meanwhile), and a retry is never pending when the first was not.
        const { pending: firstPending, ...firstProps } = first;
        const { pending: retriedPending, ...retriedProps } = retried;
        expect(retriedProps).toEqual(firstProps);
        if (!firstPending) expect(retriedPending ?? false).toBe(false);
        expect(await driver.listConnections()).toEqual([{ backendName: 'volume-a1', host: t.connectors[0].host }]);
      });

      it('terminate retried succeeds; the driver does not count users, so one terminate removes the host', async () => {
        // Prepare: Cinder's attachments count the users of a host (volume item `connections`), not the driver.
        const multi = t.multiattach ?? { driver, pool: t.pool, sizeGb: 1 };
        await multi.driver.createVolume({ backendName: 'volume-a2', sizeGb: multi.sizeGb, pool: multi.pool, multiattach: true });
        await multi.driver.initializeConnection('volume-a2', t.connectors[0]);
        await multi.driver.initializeConnection('volume-a2', t.connectors[0]);
        await multi.driver.initializeConnection('volume-a2', t.connectors[1]);

        // Act
        await multi.driver.terminateConnection('volume-a2', t.connectors[0]);
        await multi.driver.terminateConnection('volume-a2', t.connectors[0]);

        // Assess
        expect(await multi.driver.listConnections()).toEqual([{ backendName: 'volume-a2', host: t.connectors[1].host }]);
        expect(await multi.driver.getVolume('volume-a2')).toBeDefined();
      });

      it('refuses a connector without a host (DriverError)', async () => {
        // Prepare
        await create('volume-a3');

        // Act / Assess
        await expect(driver.initializeConnection('volume-a3', { host: '' })).rejects.toBeInstanceOf(DriverError);
      });
    });

    describe('snapshots, where the driver has them', () => {
      it('create and delete retried succeed; a snapshot is listed once, never as a volume', async (ctx) => {
        if (!isSnapshotDriver(driver)) return ctx.skip();
        // Prepare
        await (t.putSmallVolume ?? create)('volume-s1');

        // Act
        await driver.createSnapshot('volume-s1', 'snapshot-1');
        await driver.createSnapshot('volume-s1', 'snapshot-1');
        const listed = await driver.listSnapshots();
        await driver.deleteSnapshot('volume-s1', 'snapshot-1');
        await driver.deleteSnapshot('volume-s1', 'snapshot-1');
        await driver.deleteSnapshot('volume-s1', 'snapshot-never');

        // Assess
        expect(listed).toEqual([{ backendName: 'volume-s1', snapshotName: 'snapshot-1' }]);
        expect(await names()).toEqual(['volume-s1']);
        expect(await driver.listSnapshots()).toEqual([]);
      });

      it('a snapshot of an absent volume is a DriverError', async (ctx) => {
        if (!isSnapshotDriver(driver)) return ctx.skip();
        // Act / Assess
        await expect(driver.createSnapshot('volume-absent', 'snapshot-1')).rejects.toBeInstanceOf(DriverError);
        expect(await driver.listSnapshots()).toEqual([]);
      });
    });

    describe('a misbehaving backend', () => {
      it('a throttled create is a DriverError that changed nothing; the retry makes the volume once', async (ctx) => {
        if (!t.faults) return ctx.skip();
        // Prepare
        t.faults.throttleNext('CreateVolume');

        // Act
        const throttled = await create('volume-f1').catch((e: unknown) => e);
        const retried = await create('volume-f1');

        // Assess
        expect(throttled).toBeInstanceOf(DriverError);
        expect(retried.providerLocation).toBeTruthy();
        expect(await names()).toEqual(['volume-f1']);
      });

      it('a create whose reply was lost is found by the retry under the same name: one volume', async (ctx) => {
        if (!t.faults) return ctx.skip();
        // Prepare
        t.faults.loseNextReply('CreateVolume');

        // Act
        const lost = await create('volume-f2').catch((e: unknown) => e);
        const retried = await create('volume-f2');

        // Assess
        expect(lost).toBeInstanceOf(DriverError);
        expect(await names()).toEqual(['volume-f2']);
        expect(await driver.getVolume('volume-f2')).toEqual({ backendName: 'volume-f2', sizeGb: 1 });
        expect(retried.providerLocation).toBeTruthy();
      });

      it('a new volume the backend does not know yet for a moment is still created', async (ctx) => {
        if (!t.faults) return ctx.skip();
        // Prepare
        t.faults.delayVisibilityOfNextCreate();

        // Act
        const created = await create('volume-f3');

        // Assess
        expect(created.providerLocation).toBeTruthy();
        expect(await names()).toEqual(['volume-f3']);
      });
    });
  });
}

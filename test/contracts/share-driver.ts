/**
 * The share driver contract (docs/drivers.md "Share drivers"): what every ShareDriver must do,
 * whatever keeps its shares. Each driver kind runs it from test/unit/share-driver-contract.test.ts
 * (the local kinds on temporary directories; the EFS kind of the next issue on mocked SDK clients).
 *
 * `makeDriver(host)` gives a driver for a fresh, empty backend of the kind under test at `host`
 * (pool `pool0`, protocols NFS and CIFS), its record, and optionally a way to put a file into a
 * share through its export and read it back (for the data a migration must carry). The suite asks
 * for two backends when the driver declares driver-assisted migration to its own kind.
 */
import { afterEach, describe, expect, test } from 'vitest';
import { BackendNotReady, DriverError } from '../../functions/core/errors.js';
import type { DriverAccessRule, MigrationRequest, ShareBackendConfig, ShareDriver } from '../../functions/drivers/share/driver.js';
import { untilReady } from '../support/until-ready.js';

export interface ShareDataAccess {
  write(exportLocation: string, rel: string, data: string): Promise<void>;
  read(exportLocation: string, rel: string): Promise<string>;
}

/**
 * Ways to make a remote backend misbehave, for drivers whose backend is an API (aws-efs): each as
 * that API's reference says it misbehaves. A driver with no `faults` skips those cases.
 */
export interface ShareBackendFaults {
  /** The next create's call that makes the share is refused as throttled: `once`, or at every try the driver makes in one call. */
  throttleNextCreate(tries: 'once' | 'every try'): void;
  /** The next create's call that makes the share does its work, but the caller sees a timeout instead of the reply. */
  loseNextCreateReply(): void;
  /** Right after the next create, the backend's listings do not show the new share for a while, and what it exports through stays `creating` longer. */
  delayVisibilityOfNextCreate(): void;
  /** The data copy of a started driver-assisted migration of `share` stops catching up; the function it returns lets it catch up. */
  replicationFallsBehind(share: string): () => void;
}

export interface ShareDriverUnderTest {
  driver: ShareDriver;
  backend: ShareBackendConfig;
  data?: ShareDataAccess;
  faults?: ShareBackendFaults;
  cleanup(): Promise<void>;
}

const NAME = 'share-11111111-1111-4111-a111-111111111111';
const OTHER = 'share-22222222-2222-4222-a222-222222222222';
const MISSING = 'share-99999999-9999-4999-a999-999999999999';
const create = (d: ShareDriver, name = NAME, over: Partial<{ pool: string; proto: string }> = {}) => d.createShare({ name, sizeGb: 1, proto: 'NFS', pool: 'pool0', ...over });
const rule = (id: string, accessLevel: 'rw' | 'ro', accessType: 'ip' | 'user' = 'ip', accessTo = '10.0.0.1'): DriverAccessRule => ({ id, accessType, accessTo, accessLevel });
const migration = (source: string, destination: ShareBackendConfig, destName: string): MigrationRequest => ({
  source: { name: source, sizeGb: 1, proto: 'NFS' },
  destination: { name: destName, host: `${destination.host}#pool0`, backend: destination },
});

/** migration_continue until it reports phase 1 done (a driver may need many calls); bounded. */
async function continueToEnd(driver: ShareDriver, req: MigrationRequest): Promise<void> {
  for (let i = 0; i < 1000; i++) if (await driver.migrationContinue(req)) return;
  throw new Error('migration_continue did not finish phase 1 within 1000 calls');
}

export function describeShareDriverContract(name: string, makeDriver: (host: string) => Promise<ShareDriverUnderTest>): void {
  describe(`share driver contract: ${name}`, () => {
    const made: ShareDriverUnderTest[] = [];
    const backend = async (host = 'ferry@contract-a') => {
      const b = await makeDriver(host);
      made.push(b);
      return b;
    };
    afterEach(async () => {
      for (const b of made.splice(0)) await b.cleanup();
    });

    test('capabilities: every configured pool, no share servers; features declared', async () => {
      const { driver, backend: config } = await backend();
      const caps = await driver.capabilities();
      expect(caps.map((c) => c.pool)).toEqual(config.pools.map((p) => p.name));
      for (const c of caps) {
        expect(c.driverHandlesShareServers).toBe(false);
        expect(c.totalCapacityGb).toBe(config.pools.find((p) => p.name === c.pool)!.totalCapacityGb);
      }
      expect(driver.kind).toBe(config.driver);
      expect(Array.isArray(driver.features.driverAssistedMigrationTo)).toBe(true);
    });

    test('create is idempotent under a retried name; get and list show the same share; delete is idempotent', async () => {
      const { driver, data } = await backend();
      expect(await driver.getShare(NAME)).toBeUndefined();
      const first = await create(driver);
      expect(first.name).toBe(NAME);
      expect(typeof first.exportLocation).toBe('string');
      expect(first.exportLocation).not.toBe('');
      if (data) await data.write(first.exportLocation, 'kept', 'data');
      // A retry (the reply was lost) returns the share as it is, contents untouched.
      expect(await create(driver)).toEqual(first);
      if (data) expect(await data.read(first.exportLocation, 'kept')).toBe('data');
      expect(await driver.getShare(NAME)).toEqual(first);
      expect(await driver.listShares()).toEqual([first]);
      await driver.updateAccess(NAME, [rule('r1', 'ro')]);
      await driver.deleteShare(NAME);
      expect(await driver.getShare(NAME)).toBeUndefined();
      expect(await driver.listShares()).toEqual([]);
      // Its rules went with it; a retried delete, and a delete of a share never made, are fine.
      expect(await driver.getAccess(NAME)).toEqual([]);
      await driver.deleteShare(NAME);
      await driver.deleteShare(MISSING);
      // A new share of the same name starts empty.
      const again = await create(driver);
      expect(await driver.getAccess(NAME)).toEqual([]);
      expect(again.name).toBe(NAME);
    });

    test('create refuses a name that is not share-<uuid>, an unknown pool, an unknown protocol', async () => {
      const { driver } = await backend();
      await expect(create(driver, '../etc')).rejects.toBeInstanceOf(DriverError);
      await expect(create(driver, NAME, { pool: 'nope' })).rejects.toBeInstanceOf(DriverError);
      await expect(create(driver, NAME, { proto: 'CEPHFS' })).rejects.toBeInstanceOf(DriverError);
      expect(await driver.getShare(NAME)).toBeUndefined();
    });

    test('not found: get is undefined, rules are none, update_access refuses', async () => {
      const { driver } = await backend();
      expect(await driver.getShare(MISSING)).toBeUndefined();
      expect(await driver.getAccess(MISSING)).toEqual([]);
      await expect(driver.updateAccess(MISSING, [rule('r1', 'rw')])).rejects.toBeInstanceOf(DriverError);
      expect(await driver.getShare(MISSING)).toBeUndefined();
    });

    test('update_access replaces the whole rule set; a retried set changes nothing', async () => {
      const { driver } = await backend();
      await create(driver);
      const one = [rule('r1', 'ro')];
      const two = [rule('r1', 'ro'), rule('r2', 'rw', 'user', 'alice')];
      await driver.updateAccess(NAME, one);
      expect(await driver.getAccess(NAME)).toEqual(one);
      await driver.updateAccess(NAME, two);
      await driver.updateAccess(NAME, two);
      expect(await driver.getAccess(NAME)).toEqual(two);
      await driver.updateAccess(NAME, [rule('r2', 'rw', 'user', 'alice')]);
      expect(await driver.getAccess(NAME)).toEqual([rule('r2', 'rw', 'user', 'alice')]);
      await driver.updateAccess(NAME, []);
      expect(await driver.getAccess(NAME)).toEqual([]);
      // Another share's rules are its own.
      await create(driver, OTHER);
      await driver.updateAccess(OTHER, one);
      expect(await driver.getAccess(NAME)).toEqual([]);
    });

    test('connection info: mount and unmount templates, the protocol per access type', async () => {
      const { driver } = await backend();
      await create(driver);
      const info = await driver.connectionGetInfo(NAME);
      expect(info.mount).toContain('%(export)s');
      expect(info.unmount).toContain('%(path)s');
      expect(info.access_mapping).toEqual({ ip: ['nfs'], user: ['cifs'] });
      await expect(driver.connectionGetInfo('../etc')).rejects.toBeInstanceOf(DriverError);
    });

    test('migration: compatibility answers from the declared features; never with itself', async () => {
      const src = await backend('ferry@contract-a');
      const dst = await backend('ferry@contract-b');
      const declared = src.driver.features.driverAssistedMigrationTo.includes(dst.backend.driver);
      const keeps = src.driver.features.migrationKeeps;
      expect(await src.driver.migrationCheckCompatibility(migration(NAME, dst.backend, OTHER))).toEqual({
        compatible: declared,
        writable: declared && keeps.writable,
        preserve_metadata: declared && keeps.preserveMetadata,
        nondisruptive: declared && keeps.nondisruptive,
        preserve_snapshots: declared && keeps.preserveSnapshots,
      });
      expect((await src.driver.migrationCheckCompatibility(migration(NAME, src.backend, OTHER))).compatible).toBe(false);
      if (declared) return;
      // A driver that declares no driver-assisted migration refuses every migration step.
      await create(src.driver);
      const req = migration(NAME, dst.backend, OTHER);
      for (const call of [
        () => src.driver.migrationStart(req),
        () => src.driver.migrationContinue(req),
        () => src.driver.migrationComplete(req),
        () => src.driver.migrationCancel(req),
        () => src.driver.migrationGetProgress(req),
      ]) {
        await expect(call()).rejects.toBeInstanceOf(DriverError);
      }
      expect(await dst.driver.getShare(OTHER)).toBeUndefined();
    });

    test('migration (when declared): refusals before start, to itself, of bad names', async () => {
      const src = await backend('ferry@contract-a');
      const dst = await backend('ferry@contract-b');
      if (!src.driver.features.driverAssistedMigrationTo.includes(dst.backend.driver)) return;
      await create(src.driver);
      const req = migration(NAME, dst.backend, OTHER);
      await expect(src.driver.migrationContinue(req)).rejects.toBeInstanceOf(DriverError);
      await expect(src.driver.migrationComplete(req)).rejects.toBeInstanceOf(DriverError);
      await expect(src.driver.migrationStart(migration(NAME, src.backend, OTHER))).rejects.toBeInstanceOf(DriverError); // same backend
      await expect(src.driver.migrationStart(migration(NAME, dst.backend, '../escape'))).rejects.toBeInstanceOf(DriverError);
      await expect(src.driver.migrationStart(migration('../../etc', dst.backend, OTHER))).rejects.toBeInstanceOf(DriverError);
      await expect(src.driver.migrationStart(migration(MISSING, dst.backend, OTHER))).rejects.toBeInstanceOf(DriverError);
      expect(await dst.driver.getShare(OTHER)).toBeUndefined();
      // Nothing started: cancel has nothing to undo, progress is 0.
      await src.driver.migrationCancel(req);
      expect(await src.driver.migrationGetProgress(req)).toMatchObject({ total_progress: 0 });
    });

    test('migration (when declared): start and complete are idempotent; the destination takes the share, the source is gone', async () => {
      const src = await backend('ferry@contract-a');
      const dst = await backend('ferry@contract-b');
      if (!src.driver.features.driverAssistedMigrationTo.includes(dst.backend.driver)) return;
      const made = await create(src.driver);
      if (src.data) await src.data.write(made.exportLocation, 'f', 'carried');
      await src.driver.updateAccess(NAME, [rule('r1', 'rw')]);
      const req = migration(NAME, dst.backend, OTHER);
      await src.driver.migrationStart(req);
      await src.driver.migrationStart(req); // a retried start repeats nothing
      await continueToEnd(src.driver, req);
      expect(await src.driver.migrationContinue(req)).toBe(true); // done stays done
      expect((await src.driver.migrationGetProgress(req)).total_progress).toBe(100);
      const locations = await src.driver.migrationComplete(req);
      const moved = await dst.driver.getShare(OTHER);
      expect(moved).toBeDefined();
      expect(locations).toEqual([moved!.exportLocation]);
      if (dst.data) expect(await dst.data.read(moved!.exportLocation, 'f')).toBe('carried');
      // The source backend is cleaned, rules too; a retried complete gives the same answer.
      expect(await src.driver.getShare(NAME)).toBeUndefined();
      expect(await src.driver.getAccess(NAME)).toEqual([]);
      expect(await src.driver.migrationComplete(req)).toEqual(locations);
      // A completed migration cannot be cancelled.
      await expect(src.driver.migrationCancel(req)).rejects.toBeInstanceOf(DriverError);
      expect(await dst.driver.getShare(OTHER)).toEqual(moved);
    });

    test('migration (when declared): cancel removes the destination, leaves the source; idempotent; a new start begins again', async () => {
      const src = await backend('ferry@contract-a');
      const dst = await backend('ferry@contract-b');
      if (!src.driver.features.driverAssistedMigrationTo.includes(dst.backend.driver)) return;
      const made = await create(src.driver);
      if (src.data) await src.data.write(made.exportLocation, 'f', 'stays');
      const req = migration(NAME, dst.backend, OTHER);
      await src.driver.migrationStart(req);
      await src.driver.migrationCancel(req);
      expect(await dst.driver.getShare(OTHER)).toBeUndefined();
      expect(await src.driver.getShare(NAME)).toEqual(made);
      if (src.data) expect(await src.data.read(made.exportLocation, 'f')).toBe('stays');
      await src.driver.migrationCancel(req);
      // After phase 1 too.
      await src.driver.migrationStart(req);
      await continueToEnd(src.driver, req);
      await src.driver.migrationCancel(req);
      expect(await dst.driver.getShare(OTHER)).toBeUndefined();
      expect(await src.driver.getShare(NAME)).toEqual(made);
      await src.driver.migrationStart(req);
      expect((await src.driver.migrationGetProgress(req)).total_progress).toBeLessThan(100);
    });

    describe('a misbehaving backend', () => {
      test('a create throttled once is sent again within the call: one share', async (ctx) => {
        const { driver, faults } = await backend();
        if (!faults) return ctx.skip();
        faults.throttleNextCreate('once');
        const { value: made } = await untilReady(() => create(driver));
        expect(await driver.listShares()).toEqual([made]);
      });

      test('a create throttled at every try is BackendNotReady carrying the operation, nothing made; the next run makes it once', async (ctx) => {
        const { driver, faults, backend: config } = await backend();
        if (!faults) return ctx.skip();
        faults.throttleNextCreate('every try');
        const throttled = await create(driver).then(() => undefined, (e: unknown) => e);
        // Not a DriverError: the step's Retry waits and runs again, the operation does not fail.
        expect(throttled).toBeInstanceOf(BackendNotReady);
        expect(throttled).not.toBeInstanceOf(DriverError);
        expect((throttled as BackendNotReady).context).toMatchObject({ host: config.host, code: expect.stringMatching(/Throttl|RequestLimitExceeded/) });
        expect(await driver.listShares()).toEqual([]);
        const { value: made } = await untilReady(() => create(driver));
        expect(await driver.listShares()).toEqual([made]);
      });

      test('a create whose reply was lost is found by the retry under the same name: one share', async (ctx) => {
        const { driver, faults } = await backend();
        if (!faults) return ctx.skip();
        faults.loseNextCreateReply();
        const lost = await untilReady(() => create(driver)).then(() => undefined, (e: unknown) => e);
        // The call may see the lost reply (a DriverError) or find its own share again within the call.
        if (lost !== undefined) expect(lost).toBeInstanceOf(DriverError);
        const { value: made } = await untilReady(() => create(driver));
        expect(await driver.listShares()).toEqual([made]);
        expect(await driver.getShare(NAME)).toEqual(made);
      });

      test('a new share the backend does not list yet, its exports still creating, is made once and then seen', async (ctx) => {
        const { driver, faults } = await backend();
        if (!faults) return ctx.skip();
        faults.delayVisibilityOfNextCreate();
        const { value: made } = await untilReady(() => create(driver));
        // A retried create (the step ran again) in the same moment makes no second one.
        expect((await untilReady(() => create(driver))).value).toEqual(made);
        const listed = await untilReady(async () => {
          const all = await driver.listShares();
          if (all.length === 0) throw new BackendNotReady('not listed yet');
          return all;
        });
        expect(listed.value).toEqual([made]);
      });

      test('migration (when declared): a copy that falls behind keeps phase 1 open, progress under 100; caught up, it completes', async (ctx) => {
        const src = await backend('ferry@contract-a');
        const dst = await backend('ferry@contract-b');
        if (!src.faults || !src.driver.features.driverAssistedMigrationTo.includes(dst.backend.driver)) return ctx.skip();
        await untilReady(() => create(src.driver));
        const req = migration(NAME, dst.backend, OTHER);
        await untilReady(() => src.driver.migrationStart(req));
        const catchUp = src.faults.replicationFallsBehind(NAME);
        for (let i = 0; i < 5; i++) expect((await untilReady(() => src.driver.migrationContinue(req))).value).toBe(false);
        expect((await src.driver.migrationGetProgress(req)).total_progress).toBeLessThan(100);
        catchUp();
        await continueToEnd(src.driver, req);
        expect((await src.driver.migrationGetProgress(req)).total_progress).toBe(100);
        const locations = await src.driver.migrationComplete(req);
        expect(locations).toEqual([(await dst.driver.getShare(OTHER))!.exportLocation]);
        expect(await src.driver.getShare(NAME)).toBeUndefined();
      });
    });
  });
}

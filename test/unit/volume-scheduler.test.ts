import { describe, expect, test } from 'vitest';
import type { PoolCapabilities } from '../../functions/drivers/volume/driver.js';
import { filterAndWeigh, noPoolReason, sharedTargetsOf, type PoolState } from '../../functions/volumes/scheduler.js';

function pool(host: string, opts: { total?: number; allocated?: number; name?: string; multiattach?: boolean; az?: string } = {}): PoolState {
  const caps: PoolCapabilities = {
    pool: 'pool0', totalCapacityGb: opts.total ?? 100, freeCapacityGb: 0, multiattach: opts.multiattach ?? true, sharedTargets: false,
    storageProtocol: 'local', volumeBackendName: opts.name ?? host, driverVersion: '1', vendorName: 'Ferry',
  };
  return {
    host: `${host}#pool0`,
    backend: { host, driver: 'local', pools: [], serviceUuid: 's', volumeBackendName: opts.name ?? host, ...(opts.az ? { availabilityZone: opts.az } : {}) },
    caps,
    allocatedGb: opts.allocated ?? 0,
  };
}

const req = (sizeGb: number, extraSpecs: Record<string, string> = {}, availabilityZone = 'nova') => ({ sizeGb, extraSpecs, availabilityZone });

describe('filterAndWeigh', () => {
  test('the pool with the most free capacity comes first', () => {
    const out = filterAndWeigh([pool('a', { allocated: 60 }), pool('b', { allocated: 10 }), pool('c', { allocated: 30 })], req(5));
    expect(out.chosen.map((p) => p.host)).toEqual(['b#pool0', 'c#pool0', 'a#pool0']);
  });
  test('capacity: allocated + size must not exceed total (exactly full passes)', () => {
    const out = filterAndWeigh([pool('a', { allocated: 90 }), pool('b', { allocated: 91 })], req(10));
    expect(out.chosen.map((p) => p.host)).toEqual(['a#pool0']);
    expect(out.rejected).toEqual([{ host: 'b#pool0', filter: 'capacity', reason: 'has 9 GiB free, 10 GiB requested' }]);
  });
  test('volume_backend_name keeps only the named backend', () => {
    const out = filterAndWeigh([pool('a', { name: 'lvm-a' }), pool('b', { name: 'lvm-b' })], req(1, { volume_backend_name: 'lvm-b' }));
    expect(out.chosen.map((p) => p.host)).toEqual(['b#pool0']);
  });
  test("multiattach='<is> True' needs the multiattach capability", () => {
    const out = filterAndWeigh([pool('a', { multiattach: false }), pool('b')], req(1, { multiattach: '<is> True' }));
    expect(out.chosen.map((p) => p.host)).toEqual(['b#pool0']);
    expect(out.rejected[0]!.filter).toBe('multiattach');
  });
  test('a pool in another availability zone is filtered', () => {
    const out = filterAndWeigh([pool('a', { az: 'az2' }), pool('b')], req(1));
    expect(out.chosen.map((p) => p.host)).toEqual(['b#pool0']);
  });
  test('nothing passes: a reason that names each pool', () => {
    const r = req(500);
    const out = filterAndWeigh([pool('a'), pool('b', { name: 'x' })], r);
    expect(out.chosen).toEqual([]);
    expect(noPoolReason(r, out.rejected)).toBe('No pool can take a 500 GiB volume: a#pool0 has 100 GiB free, 500 GiB requested; b#pool0 has 100 GiB free, 500 GiB requested.');
  });
});

test('shared targets: false when the backend says so, null for NVMe, else iSCSI-ness', () => {
  const caps = pool('a').caps;
  expect(sharedTargetsOf({ ...caps, sharedTargets: false })).toBe(false);
  expect(sharedTargetsOf({ ...caps, sharedTargets: true, storageProtocol: 'NVMe-oF' })).toBeNull();
  expect(sharedTargetsOf({ ...caps, sharedTargets: true, storageProtocol: 'iSCSI' })).toBe(true);
});

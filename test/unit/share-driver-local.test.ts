/** The local share driver: directories as shares, rules beside them, read-only by chmod, migration compatibility by kind. */
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { ConfigurationError } from '../../functions/core/errors.js';
import type { LocalShareBackendConfig } from '../../functions/drivers/share/driver.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';
import { filterAndWeighShares, type SharePoolState } from '../../functions/shares/scheduler.js';

let root: string;
const name = 'share-11111111-1111-4111-a111-111111111111';
const cfg = (host: string, driver: 'local-a' | 'local-b'): LocalShareBackendConfig => ({ host, driver, root: join(root, host), pools: [{ name: 'pool0', totalCapacityGb: 10 }], shareBackendName: host.split('@')[1]!, protocols: ['NFS', 'CIFS'] });

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'ferry-share-driver-'));
});
afterEach(async () => rm(root, { recursive: true, force: true }));

// What every share driver does (idempotency, not found, update_access, refusals, migration by
// declaration) is the contract suite: test/contracts/share-driver.ts, run by share-driver-contract.test.ts.
describe('local share driver', () => {
  test('the export is the directory; rules are recorded beside it; all-ro rules make it read-only, any rw writable', async () => {
    const d = new LocalShareDriver(cfg('ferry@nfs-a', 'local-a'));
    const made = await d.createShare({ name, sizeGb: 1, proto: 'NFS', pool: 'pool0' });
    expect(made.exportLocation).toBe(join(root, 'ferry@nfs-a', name));
    await writeFile(join(made.exportLocation, 'f'), 'data');
    await d.updateAccess(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.1', accessLevel: 'ro' }]);
    expect((await stat(made.exportLocation)).mode & 0o777).toBe(0o555);
    expect(JSON.parse(await readFile(made.exportLocation + '.access.json', 'utf8'))).toHaveLength(1);
    await d.updateAccess(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.1', accessLevel: 'ro' }, { id: 'r2', accessType: 'user', accessTo: 'alice', accessLevel: 'rw' }]);
    expect((await stat(made.exportLocation)).mode & 0o777).toBe(0o755);
    // A read-only share (and its contents) is removed too.
    await d.updateAccess(name, [{ id: 'r1', accessType: 'ip', accessTo: '10.0.0.1', accessLevel: 'ro' }]);
    await d.deleteShare(name);
    await expect(stat(made.exportLocation)).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(stat(made.exportLocation + '.access.json')).rejects.toMatchObject({ code: 'ENOENT' });
  });

  test('a backend record without its directory is a configuration error, not a share error', () => {
    const broken = { ...cfg('ferry@nfs-a', 'local-a'), root: '' };
    expect(() => new LocalShareDriver(broken)).toThrow(ConfigurationError);
  });

  test('migration compatibility by kind: local-a to another local-a only', async () => {
    const a = new LocalShareDriver(cfg('ferry@nfs-a', 'local-a'));
    const req = (dest: LocalShareBackendConfig) => ({ source: { name, sizeGb: 1, proto: 'NFS' }, destination: { name, host: `${dest.host}#pool0`, backend: dest } });
    expect(await a.migrationCheckCompatibility(req(cfg('ferry@nfs-b', 'local-a')))).toMatchObject({ compatible: true, writable: true, preserve_metadata: true });
    expect((await a.migrationCheckCompatibility(req(cfg('ferry@nfs-c', 'local-b')))).compatible).toBe(false);
    expect((await a.migrationCheckCompatibility(req(cfg('ferry@nfs-a', 'local-a')))).compatible).toBe(false);
    const c = new LocalShareDriver(cfg('ferry@nfs-c', 'local-b'));
    expect((await c.migrationCheckCompatibility(req(cfg('ferry@nfs-a', 'local-a')))).compatible).toBe(false);
    await expect(a.migrationStart(req(cfg('ferry@nfs-b', 'local-a')))).rejects.toThrow(/does not exist/);
  });
});

describe('share scheduler filters', () => {
  const pool = (host: string, backend: string, allocatedGb: number): SharePoolState => ({
    host: `${host}#pool0`,
    backend: { host, driver: 'local-a', pools: [], shareBackendName: backend, protocols: ['NFS'] },
    caps: { pool: 'pool0', totalCapacityGb: 10, driverHandlesShareServers: false, storageProtocol: 'NFS', vendorName: 'Ferry', driverVersion: '1', snapshotSupport: false },
    allocatedGb,
  });
  const pools = [pool('ferry@nfs-a', 'nfs-a', 8), pool('ferry@nfs-b', 'nfs-b', 2)];
  test('most free first; share_backend_name, capacity, protocol and DHSS filter', () => {
    const base = { sizeGb: 1, proto: 'NFS', extraSpecs: { driver_handles_share_servers: 'False' }, availabilityZone: null };
    expect(filterAndWeighShares(pools, base).chosen.map((p) => p.host)).toEqual(['ferry@nfs-b#pool0', 'ferry@nfs-a#pool0']);
    expect(filterAndWeighShares(pools, { ...base, extraSpecs: { ...base.extraSpecs, share_backend_name: 'nfs-a' } }).chosen.map((p) => p.host)).toEqual(['ferry@nfs-a#pool0']);
    expect(filterAndWeighShares(pools, { ...base, sizeGb: 5 }).chosen.map((p) => p.host)).toEqual(['ferry@nfs-b#pool0']);
    expect(filterAndWeighShares(pools, { ...base, proto: 'CIFS' }).chosen).toEqual([]);
    expect(filterAndWeighShares(pools, { ...base, extraSpecs: { driver_handles_share_servers: 'True' } }).chosen).toEqual([]);
  });
});

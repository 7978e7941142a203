/**
 * Fixtures of the local volume driver's replication tests
 * (test/unit/volume-driver-replication-*.test.ts):
 * a primary root and two target sites in a fresh temporary directory per test, the replicated
 * backend over them and its driver, the files of a volume on the primary and on a site, and a
 * replicated volume made directly with its initial copy.
 */
import { mkdir, mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import type { BackendConfig, ReplicatedVolumeRef } from '../../functions/drivers/volume/driver.js';
import { LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { clearDriverCache } from '../../functions/drivers/volume/registry.js';
import { clearFaults } from '../../functions/core/faults.js';
import { writeAt } from './files.js';
import { replicatedLocalBackend } from './local-backends.js';

export const MIB = 1024 * 1024;
export const VOLUME_BYTES = 64 * MIB;

export let base: string;
export let primaryRoot: string;
export let siteB: string;
export let siteC: string;
export let config: BackendConfig;
export let primary: LocalVolumeDriver;

export const volume = (name: string): ReplicatedVolumeRef => ({ volumeId: `id-${name}`, backendName: name, sizeGb: 1 });

export const primaryFile = (name: string) => join(primaryRoot, 'pool0', name);
export const replicaFile = (site: string, name: string) => join(site, 'pool0', name);

/**
 * A replicated volume with `data` at `offset`, its initial copy made. The file is made directly at
 * 64 MiB (the driver takes any file in a pool as a volume): reading a cold 1 GiB of holes costs the
 * kernel about a second, which would make these tests slow without testing anything more.
 */
export async function replicatedVolume(name: string, data = 'A-bytes', offset = 5 * MIB): Promise<void> {
  await mkdir(join(primaryRoot, 'pool0'), { recursive: true });
  await writeFile(primaryFile(name), '');
  await truncate(primaryFile(name), VOLUME_BYTES);
  await writeAt(primaryFile(name), offset, data);
  await primary.enableReplication(name);
}

/** Registers, per test, a fresh primary root and two replication target sites (site-b, site-c) with a replicated backend over them; faults and the driver cache cleared after. */
export function useReplicationSites(): void {
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
}

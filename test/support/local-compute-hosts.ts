/**
 * Fixtures of the local compute driver's own tests (test/unit/compute-driver-local-*.test.ts): two
 * hosts (cmp1, cmp2) under one compute root in a fresh temporary directory per test, an image file,
 * a local volume backend and its exports, a host's files and a guest's disk path, and a stream
 * drained to bytes.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach } from 'vitest';
import type { ComputeHostConfig, Flavor } from '../../functions/drivers/compute/driver.js';
import { LocalComputeDriver } from '../../functions/drivers/compute/local.js';
import { clearComputeDriverCache } from '../../functions/drivers/compute/registry.js';
import { clearFaultCalls, clearFaults } from '../../functions/core/faults.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import type { LocalVolumeDriver } from '../../functions/drivers/volume/local.js';
import { exportLocalVolume, localVolumeBackend } from './compute-driver-fixtures.js';

export const UUID_A = '0a1b2c3d-0000-4000-8000-00000000000a';
export const UUID_B = '0a1b2c3d-0000-4000-8000-00000000000b';
export const VOL_1 = '11111111-2222-4333-8444-555555555501';
export const VOL_2 = '11111111-2222-4333-8444-555555555502';
export const SMALL: Flavor = { vcpus: 1, memoryMb: 512, rootGb: 0 };
export const IMAGE_BYTES = 64 * 1024;

export let tmp: string;
export let computeRoot: string;
export let imagePath: string;
export let image: Buffer;
export let volumes: LocalVolumeDriver;
export let volumeConfig: BackendConfig;
export let cfg1: ComputeHostConfig;
export let cfg2: ComputeHostConfig;
export let cmp1: LocalComputeDriver;
export let cmp2: LocalComputeDriver;

export const hostConfig = (host: string): ComputeHostConfig => ({ host, driver: 'local', root: computeRoot, vcpus: 8, memoryMb: 16384, diskGb: 200 });

/** Registers, per test, a fresh root with an image file, a local volume backend and two compute hosts (cmp1, cmp2); faults and the driver cache cleared after. */
export function useLocalComputeHosts(): void {
  beforeEach(async () => {
    tmp = await mkdtemp(join(tmpdir(), 'ferry-compute-driver-'));
    computeRoot = join(tmp, 'compute');
    image = randomBytes(IMAGE_BYTES);
    imagePath = join(tmp, 'image.raw');
    await writeFile(imagePath, image);
    ({ volumes, volumeConfig } = localVolumeBackend(tmp));
    cfg1 = hostConfig('cmp1');
    cfg2 = hostConfig('cmp2');
    cmp1 = new LocalComputeDriver(cfg1);
    cmp2 = new LocalComputeDriver(cfg2);
  });

  afterEach(async () => {
    clearFaults();
    clearFaultCalls();
    clearComputeDriverCache();
    await rm(tmp, { recursive: true, force: true });
  });
}

export const exportVolume = (volumeId: string, host: string) => exportLocalVolume(volumes, volumeId, host);

/** Every file under a host directory, relative (none when the directory is missing). */
export const filesOf = (host: string): Promise<string[]> => new LocalComputeDriver(hostConfig(host)).listFiles();

export const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
export const diskPath = (host: string, uuid: string) => join(computeRoot, host, 'guests', uuid, 'disk');

export async function drain(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

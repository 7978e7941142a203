/**
 * What each inventory entry becomes when it is stored: the same records the capabilities read
 * (a volume backend's BackendConfig, a share backend's config, a compute host's config, a flavor),
 * with the ids derived from names so an apply on any machine writes the same ids, and the fields
 * `plan.ts` compares to decide whether a stored record differs from its entry.
 */
import { createHash } from 'node:crypto';
import type { ComputeHostConfig } from '../drivers/compute/driver.js';
import type { AwsEfsShareBackendConfig, LocalShareBackendConfig } from '../drivers/share/driver.js';
import type { BackendConfig } from '../drivers/volume/driver.js';
import { stableUuid } from '../compute/model.js';
import { canonicalJson } from '../core/canonical.js';
import type { CellEntry, FlavorEntry, HostEntry, ShareBackendEntry, TypeEntry, VolumeBackendEntry } from './schema.js';

export const volumeServiceUuid = (host: string) => stableUuid(`volume-service:${host}`);
export const networkUuid = (name: string) => stableUuid(`network:${name}`);
export const imageUuid = (name: string) => stableUuid(`image:${name}`);

export function volumeBackendConfig(b: VolumeBackendEntry): BackendConfig {
  const common = { host: b.host, driver: b.driver, pools: b.pools, serviceUuid: b.serviceUuid ?? volumeServiceUuid(b.host), volumeBackendName: b.volumeBackendName };
  if (b.driver === 'local') return { ...common, root: b.root, ...(b.replicationDevices ? { replicationDevices: b.replicationDevices } : {}) };
  return {
    ...common,
    availabilityZone: b.availabilityZone,
    ...(b.ebsVolumeType ? { ebsVolumeType: b.ebsVolumeType } : {}),
    ...(b.ebsIopsPerGb ? { ebsIopsPerGb: b.ebsIopsPerGb } : {}),
    ...(b.replicationDevices ? { replicationDevices: b.replicationDevices } : {}),
  };
}

/** A share backend's record: the common fields, and the kind's own (a local kind's root; an aws-efs backend's region, VPC, subnets, modes). */
export function shareBackendConfig(b: ShareBackendEntry): LocalShareBackendConfig | AwsEfsShareBackendConfig {
  const common = { host: b.host, pools: b.pools, shareBackendName: b.shareBackendName, ...(b.availabilityZone ? { availabilityZone: b.availabilityZone } : {}) };
  if (b.driver !== 'aws-efs') return { ...common, driver: b.driver, root: b.root, protocols: b.protocols };
  return {
    ...common,
    driver: b.driver,
    protocols: b.protocols,
    region: b.region,
    vpcId: b.vpcId,
    subnetIds: b.subnetIds,
    ...(b.performanceMode ? { performanceMode: b.performanceMode } : {}),
    ...(b.throughputMode ? { throughputMode: b.throughputMode } : {}),
  };
}

/** Whether a share backend keeps its shares under a root directory this process must make (the local kinds). */
export const hasShareRoot = (b: ShareBackendEntry): b is Extract<ShareBackendEntry, { root: string }> => b.driver !== 'aws-efs';

/** The fields of a volume or share type an inventory sets. */
export function typeFields(t: Pick<TypeEntry, 'description' | 'isPublic' | 'extraSpecs'>): { description: string | null; isPublic: boolean; extraSpecs: Record<string, string> } {
  return { description: t.description ?? null, isPublic: t.isPublic ?? true, extraSpecs: t.extraSpecs ?? {} };
}

/** A host's driver config; its hardware generation is its cell's. */
export function hostConfig(cell: Pick<CellEntry, 'generation'>, h: HostEntry): ComputeHostConfig {
  return { host: h.host, driver: h.driver, root: h.root, vcpus: h.vcpus, memoryMb: h.memoryMb, diskGb: h.diskGb, generation: cell.generation };
}

/** Nova's integer flavor id: the flavorid itself when numeric, else a stable 31-bit number from it. */
export function flavorIntId(flavorid: string): number {
  if (/^\d{1,9}$/.test(flavorid)) return Number(flavorid);
  return createHash('sha256').update(`flavor:${flavorid}`).digest().readUInt32LE(0) & 0x7fffffff;
}

/** The fields of a flavor an inventory sets (Nova's flavors are immutable but for the description). */
export function flavorFields(f: FlavorEntry): Record<string, unknown> {
  return {
    name: f.name,
    vcpus: f.vcpus,
    memoryMb: f.memoryMb,
    rootGb: f.rootGb,
    ephemeralGb: f.ephemeralGb,
    swap: f.swapMb,
    isPublic: f.isPublic,
    description: f.description ?? null,
    extraSpecs: f.extraSpecs,
  };
}

/** Two records are the same when these are equal (core/canonical.ts). */
export const canonical = canonicalJson;

/**
 * bench/moves, cross-cell part (issue 12): resize of a cell1 server (m1.small, 1 GiB root disk with
 * BENCH_ROOT_MIB MiB of data written at its start and 1 MiB at 900 MiB, one attached volume) to m2.small (cell2), then
 * confirm; on a second such server, resize then revert. Each wall time is set against what the
 * compute driver alone needs to move the same bytes, measured in the same run right before on the
 * same server: its snapshot of the root disk uploaded to S3 (as the flow uploads it:
 * functions/servers/snapshot-upload.ts) plus a spawn from that image on a cell2 host. Goal: resize + confirm within
 * 2 s of that copy.
 */
import { createHash, randomUUID } from 'node:crypto';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { ROOT_DEVICE_NAME } from '../../functions/drivers/compute/driver.js';
import { driverOfHost } from '../../functions/servers/engine.js';
import { createImageRecord, deleteImage, getImage, imageSourceFor } from '../../functions/servers/images.js';
import { snapshotToImage } from '../../functions/servers/snapshot-upload.js';
import { findServer } from '../../functions/servers/repo.js';
import { stackCpuSeconds } from '../support/cpu.js';

export const ROOT_DATA_MIB = Number(process.env.BENCH_ROOT_MIB ?? 64);
const M2_SMALL = '3';
const CELL2_HOST = 'cmp3';

/** Attachments-API calls upstream makes (reference §1.10, one volume BDM). */
export const CROSS_CELL_REFERENCE: Record<string, { calls: number; source: string }> = {
  'cross-cell resize': { calls: 5, source: '§1.10: create att_D, create att_S2, delete att_S, update att_D, complete att_D' },
  'cross-cell confirm': { calls: 1, source: '§1.10: delete att_S2' },
  'cross-cell revert': { calls: 3, source: '§1.10: delete att_D, update att_S2, complete att_S2' },
  'driver copy (baseline)': { calls: 0, source: 'snapshot + upload + spawn through the driver, no API' },
};

export interface FlowSample {
  ms: number;
  attachmentCalls: number;
  otherCinderCalls: number;
  /** DynamoDB requests of the flow itself (run.ts: not the replicator's pass, not a cache refresh). */
  dynamo: number;
  /** Every DynamoDB request sent while the flow ran but the bench's polling. */
  dynamoAll: number;
  /** CPU milliseconds of the whole stack (run.ts: stackCpuSeconds) while the flow ran. */
  cpuMs: number;
}

export interface BenchContext {
  boot(): Promise<string>;
  newVolume(): Promise<string>;
  nova(method: string, path: string, body?: unknown): Promise<any>;
  settle(id: string): Promise<Record<string, any> | undefined>;
  measure(act: () => Promise<unknown>, id: string, expectVm?: string): Promise<FlowSample>;
  add(name: string, s: FlowSample): void;
}

const MIB = 1 << 20;

/**
 * Writes known bytes into the root disk of server `id` on `host`, one MiB at each of `atMib` (MiB
 * offsets): what a guest's file system scatters over its disk, so that a move which carries the
 * disk up to its last data (not only the data) shows.
 */
export async function writeRootData(id: string, host: string, atMib: readonly number[]): Promise<void> {
  const handle = await (await driverOfHost(host)).openGuestDevice(id, ROOT_DEVICE_NAME);
  try {
    let block = createHash('sha256').update(id).digest();
    const mib = Buffer.alloc(MIB);
    for (const m of atMib) {
      for (let pos = 0; pos < mib.length; pos += block.length) {
        block.copy(mib, pos);
        block = createHash('sha256').update(block).digest();
      }
      await handle.write(m * MIB, mib);
    }
  } finally {
    await handle.close();
  }
}

/**
 * A cell1 server with ROOT_DATA_MIB MiB of known bytes at the start of its root disk and one more
 * at 900 MiB (its last data near the end), and one attached volume.
 */
async function serverWithData(ctx: BenchContext): Promise<string> {
  const id = await ctx.boot();
  const host = String((await ctx.settle(id))!.host);
  await writeRootData(id, host, [...Array.from({ length: ROOT_DATA_MIB }, (_, m) => m), 900]);
  const volume = await ctx.newVolume();
  await ctx.nova('POST', `/servers/${id}/os-volume_attachments`, { volumeAttachment: { volumeId: volume } });
  await ctx.settle(id);
  return id;
}

/** The driver alone moving the root disk: snapshot -> S3 image -> spawn on a cell2 host (then undone, untimed). */
async function driverCopy(id: string): Promise<FlowSample> {
  const found = (await findServer(id))!;
  const source = await driverOfHost(found.instance.host!);
  const dest = await driverOfHost(CELL2_HOST);
  const imageId = randomUUID();
  const copyUuid = randomUUID();
  await createImageRecord({ id: imageId, name: 'bench-xcell-baseline', ownerProjectId: 'admin', visibility: 'private', properties: { image_type: 'snapshot' } });
  const t0 = performance.now();
  const cpu0 = stackCpuSeconds();
  await snapshotToImage(source, id, imageId);
  await dest.spawn({ uuid: copyUuid, flavor: found.instance.flavor, image: imageSourceFor(await getImage(imageId)), imageRef: imageId, powerOn: false });
  const ms = performance.now() - t0;
  const cpuMs = (stackCpuSeconds() - cpu0) * 1000;
  await dest.destroy(copyUuid);
  await deleteImage(imageId);
  return { ms, attachmentCalls: 0, otherCinderCalls: 0, dynamo: 0, dynamoAll: 0, cpuMs };
}

/** One repetition: baseline, resize + confirm on one server, resize + revert on another; both deleted. */
export async function crossCellRound(ctx: BenchContext): Promise<void> {
  const saved = process.env.FERRY_POLICY;
  process.env.FERRY_POLICY = JSON.stringify({ 'compute:servers:resize:cross_cell': 'admin_or_owner' });
  resetPolicyCache();
  try {
    const action = (id: string, body: unknown) => ctx.nova('POST', `/servers/${id}/action`, body);
    const a = await serverWithData(ctx);
    ctx.add('driver copy (baseline)', await driverCopy(a));
    ctx.add('cross-cell resize', await ctx.measure(() => action(a, { resize: { flavorRef: M2_SMALL } }), a, 'resized'));
    ctx.add('cross-cell confirm', await ctx.measure(() => action(a, { confirmResize: null }), a, 'active'));
    const b = await serverWithData(ctx);
    ctx.add('cross-cell resize', await ctx.measure(() => action(b, { resize: { flavorRef: M2_SMALL } }), b, 'resized'));
    ctx.add('cross-cell revert', await ctx.measure(() => action(b, { revertResize: null }), b, 'active'));
    for (const id of [a, b]) {
      await ctx.nova('DELETE', `/servers/${id}`);
      await ctx.settle(id);
    }
  } finally {
    if (saved === undefined) delete process.env.FERRY_POLICY;
    else process.env.FERRY_POLICY = saved;
    resetPolicyCache();
  }
}

/** The goal line: resize + confirm (and resize + revert) against the driver's copy, medians. */
export function crossCellSummary(median: (name: string) => number | undefined): string[] {
  const copy = median('driver copy (baseline)');
  const resize = median('cross-cell resize');
  if (copy === undefined || resize === undefined) return [];
  const confirm = median('cross-cell confirm') ?? 0;
  const revert = median('cross-cell revert') ?? 0;
  const over = (ms: number) => `${ms.toFixed(0)} ms, ${(ms - copy).toFixed(0)} ms beyond the driver's copy (${copy.toFixed(0)} ms, ${ROOT_DATA_MIB + 1} MiB of data in a 1 GiB root disk, the last at 900 MiB); goal <= 2000 ms beyond`;
  return [`  cross-cell resize + confirm: ${over(resize + confirm)}`, `  cross-cell resize + revert: ${over(resize + revert)}`];
}

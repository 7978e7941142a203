/**
 * Cross-cell confirm and revert failures (reference §1.7, the confirm and revert rows; traces
 * xcell_i, xcell_j): an m1 server of cell1 (cmp1, a volume, known bytes) resized to m2.small
 * (cell2) and waiting in VERIFY_RESIZE, then confirmed or reverted with one step made to fail.
 * Upstream ends in ERROR and leaves a copy behind (B3); Ferry keeps the server usable with exactly
 * one copy and nothing leaked (docs/compatibility.md "Cross-cell resize"). The afterEach deletes the
 * server and wants a clean audit.
 */
import { describe, expect, test } from 'vitest';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { action, serverState, settled } from '../support/nova.js';
import {
  allocsByHost, crossCellSuite, apiMigrations, attachmentRecords, CELL2_HOSTS, cell1Server, copies, expectSettledOn, guestsOn, LONG, migrationRecords, readRoot, readVolume, TEST, type XServer,
} from '../support/cross-cell.js';
import { fullRunRow } from '../support/failure-rows.js';

const { nova, cinder, servers } = crossCellSuite();

const host = (s: any) => s['OS-EXT-SRV-ATTR:host'] as string;

/** A cell1 server resized into cell2, waiting in VERIFY_RESIZE. */
async function resized(name: string): Promise<{ s: XServer; dest: string }> {
  const s = await cell1Server(nova, cinder, name);
  servers.push(s.id);
  await action(nova, s.id, { resize: { flavorRef: '3' } });
  const verify = await settled(nova, s.id, LONG);
  expect(verify.status, JSON.stringify(verify.fault ?? verify)).toBe('VERIFY_RESIZE');
  expect(CELL2_HOSTS).toContain(host(verify));
  return { s, dest: host(verify) };
}

/** One visible copy on `on`, one attachment per volume (attached there), the bytes as written. */
async function expectUsableOn(s: XServer, name: string, on: string): Promise<void> {
  await expectSettledOn(cinder, { id: s.id, name, vols: [s.vol] }, on);
  expect((await attachmentRecords(cinder, s.vol)).map((a) => a.status)).toEqual(['attached']);
  expect(await readRoot(s.id, on)).toBe(s.rootDigest);
  expect(await readVolume(s.id)).toBe(s.volDigest);
}

describe('cross-cell confirm and revert failures (reference §1.7)', () => {
  // Confirm row [i]: the source compute fails. Upstream: TGT and SRC ERROR, SRC left. Ferry: usable
  // on the dest with a fault, migration error, SRC copy and att_S2 gone; the kept source disks go with the delete.
  fullRunRow('confirm: the source compute fails', TEST, async () => {
    const { s, dest } = await resized('xr1');
    const mig = (await migrationRecords(s.id))[0]!.migration;
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'confirmMigration', mode: 'fail' });
    await action(nova, s.id, { confirmResize: null }, 204);
    const after = await settled(nova, s.id, LONG);
    clearFaults();
    expect(after.status).toBe('ACTIVE');
    expect(host(after)).toBe(dest);
    expect(after.flavor.original_name).toBe('m2.small');
    const { instance } = await serverState(s.id);
    expect(instance.fault?.message).toBeTruthy();
    expect(instance.systemMetadata.move_source).toBe('cmp1');
    expect((await apiMigrations(nova, s.id)).map((m) => m.status)).toEqual(['error']);
    expect(await copies(s.id)).toHaveLength(1);
    expect(await allocsByHost(mig.uuid)).toEqual({});
    expect(await allocsByHost(s.id)).toEqual({ [dest]: 1 });
    expect((await attachmentRecords(cinder, s.vol)).map((a) => a.status)).toEqual(['attached']);
    expect((await guestsOn(s.id))[dest]).toEqual(['guest']);
    expect(await readRoot(s.id, dest)).toBe(s.rootDigest);
    expect(await readVolume(s.id)).toBe(s.volDigest);
  });

  // Revert fails before the mapping flip. Upstream: TGT ERROR. Ferry: back to VERIFY_RESIZE; a second revert succeeds.
  test('revert fails before the mapping flip', TEST, async () => {
    const { s, dest } = await resized('xr2');
    injectFault({ kind: 'nova', backend: 'conductor', method: 'instance_mapping_flip', mode: 'fail' });
    await action(nova, s.id, { revertResize: null }, 202);
    const after = await settled(nova, s.id, LONG);
    clearFaults();
    expect(after.status).toBe('VERIFY_RESIZE');
    expect(host(after)).toBe(dest);
    expect((await serverState(s.id)).instance.fault?.message).toBeTruthy();
    expect((await apiMigrations(nova, s.id)).map((m) => m.status)).toEqual(['finished']);
    expect((await copies(s.id)).map((c) => c.instance!.hidden ?? false)).toEqual([false, true]);
    expect(await readVolume(s.id)).toBe(s.volDigest);
    await action(nova, s.id, { revertResize: null }, 202);
    const reverted = await settled(nova, s.id, LONG);
    expect(reverted.status).toBe('ACTIVE');
    expect(host(reverted)).toBe('cmp1');
    expect(reverted.flavor.original_name).toBe('m1.small');
    await expectUsableOn(s, 'xr2', 'cmp1');
  });

  // Revert row [j]: the dest revert fails after the flip. Upstream: SRC ERROR, TGT left (B3).
  // Ferry: finished forward on the source (the rollback repeats the dest part), a fault.
  fullRunRow('revert: the dest revert fails', TEST, async () => {
    const { s, dest } = await resized('xr3');
    injectFault({ kind: 'compute', backend: dest, method: 'destroy', mode: 'fail', times: 1 });
    await action(nova, s.id, { revertResize: null }, 202);
    const after = await settled(nova, s.id, LONG);
    clearFaults();
    expect(after.status).toBe('ACTIVE');
    expect(host(after)).toBe('cmp1');
    expect(after.flavor.original_name).toBe('m1.small');
    expect((await serverState(s.id)).instance.fault?.message).toBeTruthy();
    expect(await allocsByHost(s.id)).toEqual({ cmp1: 1 });
    await expectUsableOn(s, 'xr3', 'cmp1');
  });

  // Revert row: finish at the source fails once. Upstream: SRC ERROR. Ferry: the rollback finishes it, ACTIVE with a fault.
  fullRunRow('revert: finish at source fails', TEST, async () => {
    const { s } = await resized('xr4');
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'finishRevertMigration', mode: 'fail', times: 1 });
    await action(nova, s.id, { revertResize: null }, 202);
    const after = await settled(nova, s.id, LONG);
    clearFaults();
    expect(after.status, JSON.stringify(after.fault ?? after)).toBe('ACTIVE');
    expect(host(after)).toBe('cmp1');
    expect((await serverState(s.id)).instance.fault?.message).toBeTruthy();
    expect((await apiMigrations(nova, s.id)).map((m) => m.status)).toEqual(['reverted']);
    await expectUsableOn(s, 'xr4', 'cmp1');
  });

  // Delete while VERIFY_RESIZE with the source compute failing its confirm: the delete still removes everything.
  test('delete while VERIFY_RESIZE, the confirm at the source failing once', TEST, async () => {
    const { s } = await resized('xr5');
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'confirmMigration', mode: 'fail', times: 1 });
    expect((await nova('DELETE', `/servers/${s.id}`)).status).toBe(204);
    const after = await settled(nova, s.id, LONG);
    clearFaults();
    if (after.status !== 'DELETED') {
      // The delete stopped at the confirm: the server is usable and a second delete finishes.
      expect(after.status, JSON.stringify(after.fault ?? after)).not.toBe('ERROR');
      expect((await nova('DELETE', `/servers/${s.id}`)).status).toBe(204);
      expect((await settled(nova, s.id, LONG)).status).toBe('DELETED');
    }
    expect(await copies(s.id)).toEqual([]);
    expect(await attachmentRecords(cinder, s.vol)).toEqual([]);
    expect((await cinder('GET', `/volumes/${s.vol}`)).body.volume.status).toBe('available');
  });
});

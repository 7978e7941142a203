/**
 * Cross-cell resize failures (reference §1.7, the resize rows; traces xcell_d, e, f): an m1 server
 * of cell1 (cmp1, a volume, known root-disk and volume bytes) resized to m2.small, which only cell2
 * (cmp3/cmp4) can take, with one step made to fail. Upstream leaves RESIZE (bug B1) or ERROR with
 * volumes on a placeholder; Ferry rolls every one of them back to the server as it was: ACTIVE on
 * cmp1, old flavor, task None, a fault, migration `error`, nothing of the move left in either cell
 * (docs/compatibility.md "Cross-cell resize"). The afterEach deletes the server and wants a clean
 * audit.
 */
import { describe, expect, test } from 'vitest';
import { clearFaults, injectFault, type FaultSpec } from '../../functions/core/faults.js';
import { listPortsOf } from '../../functions/servers/network.js';
import { action, serverState, settled } from '../support/nova.js';
import {
  allocsByHost, crossCellSuite, apiMigrations, attachmentRecords, CELL2_HOSTS, cell1Server, copies, expectSettledOn, LONG, readRoot, readVolume, TEST, type XServer,
} from '../support/cross-cell.js';
import { fullRunRow } from '../support/failure-rows.js';

const { nova, cinder, servers } = crossCellSuite();

/** A fault on a compute call of whichever cell2 host the scheduler picks. */
const onCell2 = (method: string, extra: Partial<FaultSpec> = {}) => {
  for (const backend of CELL2_HOSTS) injectFault({ kind: 'compute', backend, method, mode: 'fail', ...extra });
};

/** Resizes to m2.small with the fault in place, and returns the server once nothing runs on it. */
async function failedResize(name: string, inject: () => void): Promise<{ s: XServer; attS: string; body: any }> {
  const s = await cell1Server(nova, cinder, name);
  servers.push(s.id);
  const attS = (await serverState(s.id)).bdms.find((b) => b.volumeId === s.vol)!.attachmentId!;
  inject();
  await action(nova, s.id, { resize: { flavorRef: '3' } });
  const body = await settled(nova, s.id, LONG);
  clearFaults();
  return { s, attS, body };
}

/**
 * Ferry's promise for every resize row: the server as it was on cmp1 (status, flavor, host, task
 * None, its bytes), a fault and a failed `resize` action, migration `error`, allocations back on
 * the instance, one copy, one attachment per volume connected to cmp1, no image, guest, binding
 * or claim left in cell2.
 */
async function expectBackOnSource(name: string, r: { s: XServer; body: any }, attachmentKept?: string): Promise<void> {
  const { s, body } = r;
  expect(body.status, JSON.stringify(body)).toBe('ACTIVE');
  expect(body['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
  expect(body['OS-EXT-STS:task_state']).toBeNull();
  expect(body.flavor.original_name).toBe('m1.small');
  const { instance } = await serverState(s.id);
  expect(instance.fault?.message, 'an instance fault').toBeTruthy();
  expect(instance.oldFlavor ?? null).toBeNull();
  expect((await apiMigrations(nova, s.id)).map((m) => m.status)).toEqual(['error']);
  expect(await allocsByHost(s.id)).toEqual({ cmp1: 1 });
  const acts = (await nova('GET', `/servers/${s.id}/os-instance-actions`)).body.instanceActions;
  expect(acts[0]).toMatchObject({ action: 'resize', message: 'Error' });
  expect(await copies(s.id)).toHaveLength(1);
  await expectSettledOn(cinder, { id: s.id, name, vols: [s.vol] }, 'cmp1');
  const recs = await attachmentRecords(cinder, s.vol);
  expect(recs.map((a) => a.status)).toEqual(['attached']);
  if (attachmentKept) expect(recs[0]!.id).toBe(attachmentKept);
  for (const port of await listPortsOf(s.id)) expect(Object.keys(port.bindings), 'port bindings').toEqual(['cmp1']);
  expect(await readRoot(s.id, 'cmp1')).toBe(s.rootDigest);
  expect(await readVolume(s.id)).toBe(s.volDigest);
  // Still a working server: it resizes across cells once the fault is gone.
  await action(nova, s.id, { resize: { flavorRef: '3' } });
  const verify = await settled(nova, s.id, LONG);
  expect(verify.status, JSON.stringify(verify.fault ?? verify)).toBe('VERIFY_RESIZE');
  await action(nova, s.id, { revertResize: null }, 202);
  expect((await settled(nova, s.id, LONG)).status).toBe('ACTIVE');
  expect(await readVolume(s.id)).toBe(s.volDigest);
}

describe('cross-cell resize failures (reference §1.7)', () => {
  // Row 1: the external API checks fail before anything is made. Upstream and Ferry: task None, migration error.
  fullRunRow('external API checks fail', TEST, async () => {
    const r = await failedResize('xf1', () => injectFault({ kind: 'nova', backend: 'conductor', method: 'external_api_checks', mode: 'fail' }));
    await expectBackOnSource('xf1', r, r.attS);
  });

  // Row 2 [f]: the claim at the destination fails. Upstream: stuck in RESIZE (B1). Ferry: back on cmp1, att_D and the TGT copy gone.
  test('PrepResizeAtDest fails (the claim)', TEST, async () => {
    const r = await failedResize('xf2', () => {
      for (const backend of CELL2_HOSTS) injectFault({ kind: 'compute', backend, method: 'resize_claim', mode: 'fail' });
    });
    await expectBackOnSource('xf2', r, r.attS);
  });

  // Row 3: power-off at the source fails. Upstream and Ferry: vm unchanged, task None; the image, att_D and TGT deleted.
  fullRunRow('prep at source: power-off fails', TEST, async () => {
    const r = await failedResize('xf3', () => injectFault({ kind: 'compute', backend: 'cmp1', method: 'powerOff', mode: 'fail' }));
    await expectBackOnSource('xf3', r, r.attS);
  });

  // Row 4: the snapshot fails after the power-off. Upstream leaves the guest off; Ferry powers it on again.
  test('prep at source: snapshot fails', TEST, async () => {
    const r = await failedResize('xf4', () => injectFault({ kind: 'compute', backend: 'cmp1', method: 'snapshot', mode: 'fail' }));
    expect(r.body['OS-EXT-STS:power_state']).toBe(1);
    await expectBackOnSource('xf4', r, r.attS);
  });

  // Row 5 [e]: terminating the volume connections fails (the original attachment's delete). Upstream:
  // ERROR, hard reboot needed. Ferry: the guest defined again on cmp1 from its kept disks, the volume reconnected.
  fullRunRow('prep at source: terminate volume connections fails', TEST, async () => {
    const r = await failedResize('xf5', () => injectFault({ kind: 'cinder', backend: 'nova', method: 'attachment_delete', mode: 'fail', times: 1 }));
    // The rollback made a new attachment for cmp1 (the original one was being replaced).
    await expectBackOnSource('xf5', r);
  });

  // Row 6 [d]: the spawn at the destination fails. Upstream: ERROR, att_S2 without a connector. Ferry: back on cmp1.
  fullRunRow('finish at dest fails (spawn)', TEST, async () => {
    const r = await failedResize('xf6', () => onCell2('spawn'));
    await expectBackOnSource('xf6', r);
  });

  // Row 7: the mapping flip fails after a successful finish. Upstream: SRC active with its guest
  // destroyed, the dest guest orphaned. Ferry: the flip is one transaction, nothing of it landed,
  // so the rollback takes the spawned dest guest down and brings the server back on cmp1.
  test('the instance mapping flip fails after the finish', TEST, async () => {
    const r = await failedResize('xf7', () => injectFault({ kind: 'nova', backend: 'conductor', method: 'instance_mapping_flip', mode: 'fail' }));
    await expectBackOnSource('xf7', r);
  });
});

import { describe, expect, test } from 'vitest';
import { Conflict, InvalidVolume, NotFound } from '../../functions/core/errors.js';
import type { Attachment } from '../../functions/attachments/model.js';
import {
  buildConnectionInfo,
  complete,
  connect,
  MULTIATTACH_RESERVE_FROM,
  needsMultiattachBootablePolicy,
  orList,
  remove,
  reserve,
  resolveMode,
  volumeStateAfterDetach,
} from '../../functions/attachments/transitions.js';
import type { AttachmentSummary, Volume, VolumeStatus } from '../../functions/volumes/model.js';
import { connectorFor, INSTANCE_A, INSTANCE_B, localConnection, T0, T1, VOLUME_ID, volumeFixture } from '../support/attachment-fixtures.js';

const reserveA = (volume: Volume, extra: { mode?: 'rw' | 'ro'; instanceUuid?: string | null; id?: string } = {}) =>
  reserve(volume, { attachmentId: extra.id ?? 'att-1', instanceUuid: extra.instanceUuid === undefined ? INSTANCE_A : extra.instanceUuid, mode: extra.mode, now: T0 });

/** A volume with one attachment reserved, then connected on `host`. */
function connectedVolume(volume: Volume, host: string, id = 'att-1', instanceUuid: string | null = INSTANCE_A): { volume: Volume; attachment: Attachment } {
  const r = reserve(volume, { attachmentId: id, instanceUuid, now: T0 });
  return connect(r.volume, r.attachment, { connector: connectorFor(host), connection: localConnection(host), now: T1 }, { checkDuplicates: true });
}

function expectInvalid(fn: () => unknown, message: string): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(InvalidVolume);
  expect((caught as InvalidVolume).status).toBe(400);
  expect((caught as InvalidVolume).message).toBe(message);
}

describe('reserve (create without connector)', () => {
  test.each(['available', 'downloading'] as VolumeStatus[])('a non-multiattach %s volume becomes reserved; attach_status unchanged', (status) => {
    // Prepare
    const volume = volumeFixture({ status });
    // Act
    const r = reserveA(volume);
    // Assess
    expect(r.path).toBe('available');
    expect(r.volume.status).toBe('reserved');
    expect(r.volume.attachStatus).toBe('detached');
    expect(r.volume.instances).toEqual({ [INSTANCE_A]: 1 });
    expect(r.volume.attachments['att-1']).toMatchObject({ status: 'reserved', instanceUuid: INSTANCE_A, host: null, connected: false });
    expect(r.volume.version).toBe(volume.version + 1);
    expect(r.attachment).toMatchObject({
      id: 'att-1',
      volumeId: VOLUME_ID,
      projectId: 'demo',
      instanceUuid: INSTANCE_A,
      attachStatus: 'reserved',
      attachMode: 'null',
      volumeHost: 'ferry@lvm-a#pool0',
      connector: null,
      connectionInfo: null,
      attachTime: null,
    });
  });

  test.each(['in-use', 'reserved', 'attaching', 'detaching', 'creating', 'maintenance'] as VolumeStatus[])(
    'a non-multiattach %s volume refuses another instance with 400',
    (status) => {
      const volume = volumeFixture({ status, instances: { [INSTANCE_A]: 1 } });
      expectInvalid(
        () => reserveA(volume, { instanceUuid: INSTANCE_B }),
        `Invalid volume: Volume ${VOLUME_ID} status must be available or downloading to reserve, but the current status is ${status}.`,
      );
    },
  );

  test.each(['in-use', 'reserved'] as VolumeStatus[])('the same instance again on a %s non-multiattach volume gets a new reserved row; the volume status is unchanged (LP #1694530)', (status) => {
    // Prepare
    const volume = volumeFixture({ status, attachStatus: status === 'in-use' ? 'attached' : 'detached', instances: { [INSTANCE_A]: 1 } });
    // Act
    const r = reserveA(volume, { id: 'att-2' });
    // Assess
    expect(r.path).toBe('same-instance');
    expect(r.volume.status).toBe(status);
    expect(r.volume.attachStatus).toBe(volume.attachStatus);
    expect(r.volume.instances).toEqual({ [INSTANCE_A]: 2 });
    expect(r.attachment.attachStatus).toBe('reserved');
  });

  test('the same-instance override does not apply while the volume is attaching', () => {
    expectInvalid(
      () => reserveA(volumeFixture({ status: 'attaching', instances: { [INSTANCE_A]: 1 } })),
      `Invalid volume: Volume ${VOLUME_ID} status must be available or downloading to reserve, but the current status is attaching.`,
    );
  });

  test('a reserve without instance on a reserved non-multiattach volume is refused', () => {
    expectInvalid(
      () => reserveA(volumeFixture({ status: 'reserved', instances: { [INSTANCE_A]: 1 } }), { instanceUuid: null }),
      `Invalid volume: Volume ${VOLUME_ID} status must be available or downloading to reserve, but the current status is reserved.`,
    );
  });

  test.each(MULTIATTACH_RESERVE_FROM)('a multiattach %s volume accepts another instance and becomes reserved', (status) => {
    // Prepare
    const attachStatus = status === 'in-use' ? 'attached' : 'detached';
    const volume = volumeFixture({ multiattach: true, status, attachStatus, instances: { [INSTANCE_A]: 1 } });
    // Act
    const r = reserveA(volume, { instanceUuid: INSTANCE_B });
    // Assess
    expect(r.path).toBe('multiattach');
    expect(r.volume.status).toBe('reserved');
    expect(r.volume.attachStatus).toBe(attachStatus);
    expect(r.volume.instances).toEqual({ [INSTANCE_A]: 1, [INSTANCE_B]: 1 });
  });

  test.each(['detaching', 'maintenance', 'deleting', 'extending'] as VolumeStatus[])('a multiattach %s volume refuses with the allowed statuses listed', (status) => {
    expectInvalid(
      () => reserveA(volumeFixture({ multiattach: true, status })),
      `Invalid volume: Volume ${VOLUME_ID} status must be available, in-use, downloading, reserved or attaching to reserve, but the current status is ${status}.`,
    );
  });

  test.each(['error', 'error_deleting', 'error_extending', 'error_restoring'] as VolumeStatus[])('an %s volume refuses with the error-state message', (status) => {
    for (const multiattach of [false, true]) {
      expectInvalid(
        () => reserveA(volumeFixture({ status, multiattach })),
        `Invalid volume: Volume attachments can not be created if the volume is in an error state. The Volume ${VOLUME_ID} currently has a status of: ${status} `,
      );
    }
  });

  test('mode: 3.54 mode is kept; admin-metadata readonly forces ro', () => {
    expect(reserveA(volumeFixture(), { mode: 'rw' }).attachment.attachMode).toBe('rw');
    expect(reserveA(volumeFixture(), { mode: 'ro' }).attachment.attachMode).toBe('ro');
    expect(reserveA(volumeFixture({ adminMetadata: { readonly: 'True' } }), { mode: 'rw' }).attachment.attachMode).toBe('ro');
    expect(reserveA(volumeFixture({ adminMetadata: { readonly: 'True' } })).attachment.attachMode).toBe('ro');
    expect(reserveA(volumeFixture({ adminMetadata: { readonly: 'False' } })).attachment.attachMode).toBe('null');
  });

  test('the multiattach-bootable policy is needed only for an in-use bootable multiattach volume', () => {
    expect(needsMultiattachBootablePolicy(volumeFixture({ multiattach: true, bootable: true, status: 'in-use' }))).toBe(true);
    expect(needsMultiattachBootablePolicy(volumeFixture({ multiattach: true, bootable: true, status: 'available' }))).toBe(false);
    expect(needsMultiattachBootablePolicy(volumeFixture({ multiattach: true, bootable: false, status: 'in-use' }))).toBe(false);
    expect(needsMultiattachBootablePolicy(volumeFixture({ multiattach: false, bootable: true, status: 'in-use' }))).toBe(false);
  });

  test('orList joins like upstream build_or_str', () => {
    expect(orList(['a'])).toBe('a');
    expect(orList(['a', 'b'])).toBe('a or b');
    expect(orList(['a', 'b', 'c'])).toBe('a, b or c');
  });
});

describe('mode resolution (VolumeManager.attachment_update)', () => {
  test.each([
    ['null', undefined, 'rw'],
    ['null', 'ro', 'ro'],
    ['null', 'rw', 'rw'],
    ['null', 'bogus', 'rw'],
    ['rw', 'ro', 'rw'],
    ['ro', 'rw', 'ro'],
    ['ro', undefined, 'ro'],
  ] as const)('attach_mode %s with connector mode %s -> %s', (attachMode, connectorMode, expected) => {
    expect(resolveMode(attachMode, { mode: connectorMode })).toBe(expected);
  });
});

describe('connection_info (§3.5)', () => {
  test('driver data flattened with driver_volume_type, qos_specs, access_mode, encrypted, cacheable and attachment_id', () => {
    // Act
    const info = buildConnectionInfo({ driverVolumeType: 'iscsi', data: { target_portal: '10.0.0.1:3260', target_lun: 1 } }, { accessMode: 'rw', attachmentId: 'att-1' });
    // Assess
    expect(info).toEqual({
      target_portal: '10.0.0.1:3260',
      target_lun: 1,
      driver_volume_type: 'iscsi',
      qos_specs: null,
      access_mode: 'rw',
      encrypted: false,
      cacheable: false,
      attachment_id: 'att-1',
    });
  });

  test('format from admin metadata is added when present', () => {
    expect(buildConnectionInfo(localConnection('h'), { accessMode: 'ro', attachmentId: 'a', format: 'raw' })).toMatchObject({ format: 'raw', access_mode: 'ro' });
    expect(buildConnectionInfo(localConnection('h'), { accessMode: 'ro', attachmentId: 'a' })).not.toHaveProperty('format');
  });
});

describe('connect (update, or create with connector)', () => {
  test('the attachment becomes attaching with connector, host, mountpoint na, time, mode and connection_info; the volume attaching', () => {
    // Prepare
    const r = reserveA(volumeFixture());
    // Act
    const c = connect(r.volume, r.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    // Assess
    expect(c.attachment).toMatchObject({
      attachStatus: 'attaching',
      attachedHost: 'cmp1',
      mountpoint: 'na',
      attachTime: T1,
      attachMode: 'rw',
      connector: connectorFor('cmp1'),
      // The item's version is the item's: the state goes to the volume's summary.
      version: r.attachment.version,
    });
    expect(c.attachment.connectionInfo).toEqual({
      ...localConnection('cmp1').data,
      driver_volume_type: 'local',
      qos_specs: null,
      access_mode: 'rw',
      encrypted: false,
      cacheable: false,
      attachment_id: 'att-1',
    });
    expect(c.volume.status).toBe('attaching');
    expect(c.volume.attachStatus).toBe('attaching');
    expect(c.volume.connections).toEqual({ cmp1: ['att-1'] });
    expect(c.volume.attachments['att-1']).toMatchObject({ status: 'attaching', host: 'cmp1', connected: true, mode: 'rw', attachedAt: T1 });
    expect(c.releasedHost).toBeNull();
  });

  test('a mode chosen at create overrides the connector and is written into the stored connector', () => {
    const r = reserveA(volumeFixture(), { mode: 'ro' });
    const c = connect(r.volume, r.attachment, { connector: connectorFor('cmp1', { mode: 'rw', mountpoint: '/dev/vdb' }), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    expect(c.attachment.attachMode).toBe('ro');
    expect(c.attachment.connector?.mode).toBe('ro');
    expect(c.attachment.mountpoint).toBe('/dev/vdb');
    expect(c.attachment.connectionInfo?.access_mode).toBe('ro');
  });

  test('admin-metadata readonly makes access_mode ro', () => {
    const volume = volumeFixture({ adminMetadata: { readonly: 'True' } });
    const r = reserveA(volume);
    const c = connect(r.volume, r.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    expect(c.attachment.connectionInfo?.access_mode).toBe('ro');
  });

  test('an error-state volume refuses the connect with 400', () => {
    const r = reserveA(volumeFixture());
    expect(() =>
      connect({ ...r.volume, status: 'error' }, r.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true }),
    ).toThrow(InvalidVolume);
  });

  test('an attachment the volume no longer lists is not found', () => {
    const r = reserveA(volumeFixture());
    expect(() => connect(volumeFixture(), r.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true })).toThrow(NotFound);
  });

  test('duplicate connectors on a non-multiattach volume: 409 in update, allowed in create-with-connector and for multiattach', () => {
    // Prepare: instance A connected on cmp1, then a second attachment of A (live migration)
    const first = connectedVolume(volumeFixture(), 'cmp1');
    const second = reserve({ ...first.volume, status: 'in-use' }, { attachmentId: 'att-2', instanceUuid: INSTANCE_A, now: T1 });
    const input = { connector: connectorFor('cmp2'), connection: localConnection('cmp2'), now: T1 };
    // Act / Assess
    expect(() => connect(second.volume, second.attachment, input, { checkDuplicates: true })).toThrow(Conflict);
    expect(connect(second.volume, second.attachment, input, { checkDuplicates: false }).volume.connections).toEqual({ cmp1: ['att-1'], cmp2: ['att-2'] });
    const multi = { ...second.volume, multiattach: true };
    expect(() => connect(multi, second.attachment, input, { checkDuplicates: true })).not.toThrow();
  });

  test('re-updating an attachment on its own host does not trip the duplicate guard', () => {
    const first = connectedVolume(volumeFixture(), 'cmp1');
    const again = connect(first.volume, first.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    expect(again.volume.connections).toEqual({ cmp1: ['att-1'] });
  });

  test('two attachments on one host share one connection entry; moving one to another host releases nothing while the other stays', () => {
    // Prepare
    const a = connectedVolume(volumeFixture({ multiattach: true }), 'cmp1');
    const b = reserve(a.volume, { attachmentId: 'att-2', instanceUuid: INSTANCE_B, now: T1 });
    const bOn1 = connect(b.volume, b.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    // Act
    const bOn2 = connect(bOn1.volume, bOn1.attachment, { connector: connectorFor('cmp2'), connection: localConnection('cmp2'), now: T1 }, { checkDuplicates: true });
    const aOn2 = connect(bOn2.volume, a.attachment, { connector: connectorFor('cmp2'), connection: localConnection('cmp2'), now: T1 }, { checkDuplicates: true });
    // Assess
    expect(bOn1.volume.connections).toEqual({ cmp1: ['att-1', 'att-2'] });
    expect(bOn2.releasedHost).toBeNull();
    expect(bOn2.volume.connections).toEqual({ cmp1: ['att-1'], cmp2: ['att-2'] });
    expect(aOn2.releasedHost).toEqual({ host: 'cmp1', connector: connectorFor('cmp1') });
    expect(aOn2.volume.connections).toEqual({ cmp2: ['att-2', 'att-1'] });
  });
});

describe('complete', () => {
  test('the attachment becomes attached; the volume in-use/attached', () => {
    const c = connectedVolume(volumeFixture(), 'cmp1');
    const done = complete(c.volume, c.attachment, T1);
    expect(done.attachment.attachStatus).toBe('attached');
    expect(done.volume.status).toBe('in-use');
    expect(done.volume.attachStatus).toBe('attached');
    expect(done.volume.attachments['att-1']!.status).toBe('attached');
  });

  test('no state check: a reserved attachment completes too (Nova, shelved-offloaded attach)', () => {
    const r = reserveA(volumeFixture());
    expect(complete(r.volume, r.attachment, T1).volume.status).toBe('in-use');
  });
});

const summary = (status: AttachmentSummary['status']): AttachmentSummary => ({ status, instanceUuid: null, host: null, mode: 'rw', attachedAt: null, connected: false });

describe('volume state after a detach', () => {
  test.each([
    [['attached', 'reserved'], 'in-use', 'attached'],
    [['attaching', 'reserved'], 'attaching', 'attaching'],
    [['detaching', 'reserved'], 'detaching', 'detaching'],
    [['reserved'], 'reserved', 'reserved'],
    [['attached', 'attaching', 'detaching', 'reserved'], 'in-use', 'attached'],
    [[], 'available', 'detached'],
  ] as const)('remaining %j -> %s / %s', (remaining, status, attachStatus) => {
    expect(volumeStateAfterDetach(volumeFixture({ status: 'in-use' }), remaining.map(summary))).toEqual({ status, attachStatus });
  });

  test('none left: a migrating or uploading volume keeps its status; a finished migration does not', () => {
    expect(volumeStateAfterDetach(volumeFixture({ status: 'in-use', migrationStatus: 'migrating' }), [])).toEqual({ status: 'in-use', attachStatus: 'detached' });
    expect(volumeStateAfterDetach(volumeFixture({ status: 'uploading' }), [])).toEqual({ status: 'uploading', attachStatus: 'detached' });
    expect(volumeStateAfterDetach(volumeFixture({ status: 'in-use', migrationStatus: 'success' }), [])).toEqual({ status: 'available', attachStatus: 'detached' });
    expect(volumeStateAfterDetach(volumeFixture({ status: 'in-use', migrationStatus: 'error' }), [])).toEqual({ status: 'available', attachStatus: 'detached' });
  });
});

describe('remove (delete)', () => {
  test('the last attachment: tombstone detached, volume available/detached, the host connection released', () => {
    // Prepare
    const c = complete(...Object.values(connectedVolume(volumeFixture(), 'cmp1')) as [Volume, Attachment], T1);
    // Act
    const r = remove(c.volume, c.attachment, T1);
    // Assess
    expect(r.volume).toMatchObject({ status: 'available', attachStatus: 'detached', attachments: {}, instances: {}, connections: {} });
    expect(r.tombstone).toMatchObject({ deleted: true, attachStatus: 'detached', detachTime: T1, disconnect: { host: 'cmp1', connector: connectorFor('cmp1') } });
    expect(r.disconnect).toEqual({ host: 'cmp1', connector: connectorFor('cmp1') });
    expect(r.remaining).toEqual([]);
  });

  test('a host shared with another attachment keeps its connection; the remaining one decides the status', () => {
    // Prepare: two attachments of a multiattach volume on cmp1, both attached
    const a = connectedVolume(volumeFixture({ multiattach: true }), 'cmp1');
    const aDone = complete(a.volume, a.attachment, T1);
    const b = reserve(aDone.volume, { attachmentId: 'att-2', instanceUuid: INSTANCE_B, now: T1 });
    const bOn = connect(b.volume, b.attachment, { connector: connectorFor('cmp1'), connection: localConnection('cmp1'), now: T1 }, { checkDuplicates: true });
    const bDone = complete(bOn.volume, bOn.attachment, T1);
    // Act
    const r = remove(bDone.volume, aDone.attachment, T1);
    // Assess
    expect(r.disconnect).toBeNull();
    expect(r.tombstone.disconnect).toBeNull();
    expect(r.volume.connections).toEqual({ cmp1: ['att-2'] });
    expect(r.volume.instances).toEqual({ [INSTANCE_B]: 1 });
    expect(r.volume).toMatchObject({ status: 'in-use', attachStatus: 'attached' });
    expect(r.remaining.map((x) => x.id)).toEqual(['att-2']);
  });

  test('a reserved attachment has no connection to release; error_* attachments do not decide the status', () => {
    const r = reserveA(volumeFixture());
    const withError = { ...r.volume, attachments: { ...r.volume.attachments, 'att-x': summary('error_attaching') } };
    const out = remove(withError, r.attachment, T1);
    expect(out.disconnect).toBeNull();
    expect(out.volume).toMatchObject({ status: 'available', attachStatus: 'detached' });
    expect(out.remaining.map((x) => x.id)).toEqual(['att-x']);
  });

  test('an instance with two attachments keeps a count of one after one is removed', () => {
    const first = connectedVolume(volumeFixture(), 'cmp1');
    const second = reserve({ ...first.volume, status: 'in-use' }, { attachmentId: 'att-2', instanceUuid: INSTANCE_A, now: T1 });
    const out = remove(second.volume, first.attachment, T1);
    expect(out.volume.instances).toEqual({ [INSTANCE_A]: 1 });
    expect(out.volume).toMatchObject({ status: 'reserved', attachStatus: 'reserved' });
  });
});

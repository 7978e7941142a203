/**
 * The Nova server-side view builders per microversion for servers: summary/detail (embedded flavor
 * 2.47, extended attributes 2.3, locked 2.9, host_status 2.16, description 2.19, tags 2.26, trusted
 * certs 2.63, locked_reason 2.73, hostname for all 2.90), times, the status map, the host id and
 * hostname helpers, and volume attachments (2.70, 2.79, 2.89). Migrations and instance actions:
 * server-views-history.test.ts.
 */
import { describe, expect, test } from 'vitest';
import type { TaskState, VmState } from '../../functions/servers/model.js';
import {
  generateHostId,
  isoTime,
  sanitizeHostname,
  serverDetail,
  serverSummary,
  statusFromState,
  subsecondTime,
  volumeAttachmentCreateView,
  volumeAttachmentView,
} from '../../functions/servers/views.js';
import { v, CTX, CTX_P, UUID, IMAGE, VOL, instance, bdm, ADDRS, extra, ADMIN, USER, sha224 } from '../support/server-view-fixtures.js';

describe('times', () => {
  test.each([
    ['2019-04-23T15:19:09.123Z', '2019-04-23T15:19:09Z', '2019-04-23T15:19:09.123000'],
    ['2019-04-23T15:19:09Z', '2019-04-23T15:19:09Z', '2019-04-23T15:19:09.000000'],
    ['2019-04-23T15:19:09.855016', '2019-04-23T15:19:09Z', '2019-04-23T15:19:09.855016'],
    ['2019-04-23T17:19:09.500+02:00', '2019-04-23T15:19:09Z', '2019-04-23T15:19:09.500000'],
  ])('%s -> isotime %s, jsonutils %s', (input, iso, sub) => {
    expect(isoTime(input)).toBe(iso);
    expect(subsecondTime(input)).toBe(sub);
  });
  test('null stays null', () => {
    expect(isoTime(null)).toBeNull();
    expect(subsecondTime(undefined)).toBeNull();
  });
});

describe('status mapping (common.status_from_state)', () => {
  test.each<[VmState, TaskState | null, string]>([
    ['active', 'resize_prep', 'RESIZE'],
    ['resized', null, 'VERIFY_RESIZE'],
    ['resized', 'resize_reverting', 'REVERT_RESIZE'],
    ['active', 'resize_reverting', 'ACTIVE'],
    ['stopped', null, 'SHUTOFF'],
    ['stopped', 'resize_migrating', 'RESIZE'],
    ['shelved_offloaded', null, 'SHELVED_OFFLOADED'],
    ['shelved', 'shelving_offloading', 'SHELVED'],
    ['active', 'migrating', 'MIGRATING'],
    ['error', null, 'ERROR'],
    ['building', 'scheduling', 'BUILD'],
    ['active', 'rebooting_hard', 'HARD_REBOOT'],
    ['deleted', null, 'DELETED'],
  ])('%s + %s = %s', (vm, task, status) => {
    expect(statusFromState(vm, task)).toBe(status);
    expect(serverDetail(instance({ vmState: vm, taskState: task }), extra(), v('2.1'), CTX, USER).status).toBe(status);
  });
});

describe('server summary', () => {
  test('id, name and self/bookmark links, with the URL project only when given', () => {
    expect(serverSummary(instance(), CTX)).toEqual({
      id: UUID,
      name: 'My Server_1.test',
      links: [
        { rel: 'self', href: `http://h/compute/v2.1/servers/${UUID}` },
        { rel: 'bookmark', href: `http://h/compute/servers/${UUID}` },
      ],
    });
    expect(serverSummary(instance(), CTX_P).links).toEqual([
      { rel: 'self', href: `http://h/compute/v2.1/p1/servers/${UUID}` },
      { rel: 'bookmark', href: `http://h/compute/p1/servers/${UUID}` },
    ]);
  });
});

describe('server detail', () => {
  test('2.1 non-admin: the full base body', () => {
    expect(serverDetail(instance(), extra(), v('2.1'), CTX_P, USER)).toEqual({
      id: UUID,
      name: 'My Server_1.test',
      status: 'ACTIVE',
      tenant_id: 'proj1',
      user_id: 'user1',
      metadata: { k: 'v' },
      hostId: sha224('proj1cmp1'),
      image: { id: IMAGE, links: [{ rel: 'bookmark', href: `http://h/compute/p1/images/${IMAGE}` }] },
      flavor: { id: '1', links: [{ rel: 'bookmark', href: 'http://h/compute/p1/flavors/1' }] },
      created: '2019-04-23T15:19:09Z',
      updated: '2019-04-23T15:19:11Z',
      addresses: ADDRS,
      accessIPv4: '',
      accessIPv6: '',
      links: [
        { rel: 'self', href: `http://h/compute/v2.1/p1/servers/${UUID}` },
        { rel: 'bookmark', href: `http://h/compute/p1/servers/${UUID}` },
      ],
      'OS-DCF:diskConfig': 'MANUAL',
      progress: 0,
      'OS-EXT-AZ:availability_zone': 'nova',
      config_drive: '',
      key_name: null,
      'OS-SRV-USG:launched_at': '2019-04-23T15:19:10.855000',
      'OS-SRV-USG:terminated_at': null,
      security_groups: [{ name: 'default' }],
      'OS-EXT-STS:task_state': null,
      'OS-EXT-STS:vm_state': 'active',
      'OS-EXT-STS:power_state': 1,
      'os-extended-volumes:volumes_attached': [{ id: VOL }],
    });
  });

  test('2.1 admin: host, instance_name, hypervisor_hostname only (no 2.3 attributes)', () => {
    const s = serverDetail(instance(), extra(), v('2.1'), CTX, ADMIN);
    expect(s['OS-EXT-SRV-ATTR:host']).toBe('cmp1');
    expect(s['OS-EXT-SRV-ATTR:hypervisor_hostname']).toBe('cmp1.node');
    expect(s['OS-EXT-SRV-ATTR:instance_name']).toBe('instance-0e12087a');
    expect(s).not.toHaveProperty('OS-EXT-SRV-ATTR:hostname');
    expect(s).not.toHaveProperty('OS-EXT-SRV-ATTR:reservation_id');
  });

  test('2.3 admin: extended attributes and delete_on_termination in volumes_attached', () => {
    const root = bdm({ uuid: 'b-root', volumeId: 'vol-root', bootIndex: 0, deviceName: '/dev/vda', deleteOnTermination: false });
    const s = serverDetail(instance({ imageRef: '' }), extra({ bdms: [root, bdm(), bdm({ uuid: 'b-img', sourceType: 'image', destinationType: 'local', volumeId: null })] }), v('2.3'), CTX, ADMIN);
    expect(s).toMatchObject({
      'OS-EXT-SRV-ATTR:reservation_id': 'r-0e12087a',
      'OS-EXT-SRV-ATTR:launch_index': 0,
      'OS-EXT-SRV-ATTR:hostname': 'my-server-1-test',
      'OS-EXT-SRV-ATTR:kernel_id': '',
      'OS-EXT-SRV-ATTR:ramdisk_id': '',
      'OS-EXT-SRV-ATTR:root_device_name': '/dev/vda',
      'OS-EXT-SRV-ATTR:user_data': null,
    });
    expect(s.image).toBe('');
    expect(s['os-extended-volumes:volumes_attached']).toEqual([
      { id: 'vol-root', delete_on_termination: false },
      { id: VOL, delete_on_termination: true },
    ]);
    // Non-admins never see them at 2.3.
    const u = serverDetail(instance(), extra(), v('2.3'), CTX, USER);
    expect(Object.keys(u).filter((k) => k.startsWith('OS-EXT-SRV-ATTR'))).toEqual([]);
  });

  test.each([
    ['2.46', false],
    ['2.47', true],
  ])('flavor at %s embedded=%s', (ver, embedded) => {
    const s = serverDetail(instance(), extra(), v(ver), CTX, USER);
    if (embedded) {
      expect(s.flavor).toEqual({ vcpus: 1, ram: 512, disk: 1, ephemeral: 0, swap: 0, original_name: 'm1.tiny', extra_specs: { 'hw:cpu_policy': 'shared' } });
      // Without the extra-specs policy the specs are left out.
      expect(serverDetail(instance(), extra(), v(ver), CTX, { isAdmin: false, flavorExtraSpecs: false }).flavor).not.toHaveProperty('extra_specs');
    } else {
      expect(s.flavor).toEqual({ id: '1', links: [{ rel: 'bookmark', href: 'http://h/compute/flavors/1' }] });
    }
  });

  test.each([
    ['2.8', []],
    ['2.9', ['locked']],
    ['2.18', ['locked']],
    ['2.19', ['locked', 'description']],
    ['2.25', ['locked', 'description']],
    ['2.26', ['locked', 'description', 'tags']],
    ['2.62', ['locked', 'description', 'tags']],
    ['2.63', ['locked', 'description', 'tags', 'trusted_image_certificates']],
    ['2.72', ['locked', 'description', 'tags', 'trusted_image_certificates']],
    ['2.73', ['locked', 'description', 'tags', 'trusted_image_certificates', 'locked_reason']],
  ])('microversioned fields at %s: %j', (ver, fields) => {
    const s = serverDetail(instance({ locked: true, systemMetadata: { locked_reason: 'maint' } }), extra({ tags: ['a'], description: 'd' }), v(ver), CTX, USER);
    for (const f of ['locked', 'description', 'tags', 'trusted_image_certificates', 'locked_reason']) {
      expect(Object.prototype.hasOwnProperty.call(s, f)).toBe(fields.includes(f));
    }
    if (fields.includes('locked')) expect(s.locked).toBe(true);
    if (fields.includes('description')) expect(s.description).toBe('d');
    if (fields.includes('tags')) expect(s.tags).toEqual(['a']);
    if (fields.includes('trusted_image_certificates')) expect(s.trusted_image_certificates).toBeNull();
    if (fields.includes('locked_reason')) expect(s.locked_reason).toBe('maint');
  });

  test('locked_reason and description default to null', () => {
    const s = serverDetail(instance(), extra(), v('2.93'), CTX, USER);
    expect(s.locked).toBe(false);
    expect(s.locked_reason).toBeNull();
    expect(s.description).toBeNull();
    expect(s.tags).toEqual([]);
  });

  test.each([
    ['2.15', true, false],
    ['2.16', true, true],
    ['2.16', false, false],
  ])('host_status at %s admin=%s shown=%s', (ver, isAdmin, shown) => {
    const s = serverDetail(instance(), extra({ hostStatus: 'UP' }), v(ver), CTX, { isAdmin });
    if (shown) expect(s.host_status).toBe('UP');
    else expect(s).not.toHaveProperty('host_status');
  });

  test.each([
    ['2.89', false],
    ['2.90', true],
  ])('non-admin hostname at %s shown=%s', (ver, shown) => {
    const s = serverDetail(instance(), extra(), v(ver), CTX, USER);
    if (shown) expect(s['OS-EXT-SRV-ATTR:hostname']).toBe('my-server-1-test');
    else expect(s).not.toHaveProperty('OS-EXT-SRV-ATTR:hostname');
    expect(s).not.toHaveProperty('OS-EXT-SRV-ATTR:host');
  });

  test('progress only for the progress statuses', () => {
    expect(serverDetail(instance({ progress: 40, taskState: 'migrating' }), extra(), v('2.1'), CTX, USER).progress).toBe(40);
    expect(serverDetail(instance({ vmState: 'resized' }), extra(), v('2.1'), CTX, USER).progress).toBe(0);
    expect(serverDetail(instance({ vmState: 'stopped' }), extra(), v('2.1'), CTX, USER)).not.toHaveProperty('progress');
    expect(serverDetail(instance({ vmState: 'shelved_offloaded' }), extra(), v('2.1'), CTX, USER)).not.toHaveProperty('progress');
  });

  test('no host: empty hostId, boot-requested zone; building: no addresses; no ports: no security groups', () => {
    const s = serverDetail(instance({ host: null, node: null, vmState: 'building', taskState: 'scheduling', availabilityZone: null }), extra({ ports: [] }), v('2.1'), CTX, USER);
    expect(s.hostId).toBe('');
    expect(s['OS-EXT-AZ:availability_zone']).toBe('');
    expect(s.addresses).toEqual({});
    expect(s).not.toHaveProperty('security_groups');
    expect(serverDetail(instance({ host: null, availabilityZone: 'az2' }), extra(), v('2.1'), CTX, USER)['OS-EXT-AZ:availability_zone']).toBe('az2');
  });

  test('fault only for ERROR/DELETED; details hidden from non-admins for code 500', () => {
    const fault500 = { code: 500, message: 'boom', details: 'Traceback...', created: '2019-04-23T15:20:00.500Z' };
    const fault400 = { ...fault500, code: 400 };
    expect(serverDetail(instance({ vmState: 'error', fault: fault500 }), extra(), v('2.1'), CTX, USER).fault).toEqual({ code: 500, created: '2019-04-23T15:20:00Z', message: 'boom' });
    expect(serverDetail(instance({ vmState: 'error', fault: fault500 }), extra(), v('2.1'), CTX, ADMIN).fault).toEqual({ code: 500, created: '2019-04-23T15:20:00Z', message: 'boom', details: 'Traceback...' });
    expect(serverDetail(instance({ vmState: 'error', fault: fault400 }), extra(), v('2.1'), CTX, USER).fault).toMatchObject({ details: 'Traceback...' });
    expect(serverDetail(instance({ vmState: 'active', fault: fault500 }), extra(), v('2.1'), CTX, ADMIN)).not.toHaveProperty('fault');
    expect(serverDetail(instance({ vmState: 'error', fault: null }), extra(), v('2.1'), CTX, ADMIN)).not.toHaveProperty('fault');
    expect(serverDetail(instance({ vmState: 'error', fault: { ...fault500, details: '' } }), extra(), v('2.1'), CTX, ADMIN).fault).not.toHaveProperty('details');
  });

  test('image override: null means volume-backed', () => {
    expect(serverDetail(instance(), extra({ image: null }), v('2.1'), CTX, USER).image).toBe('');
    expect(serverDetail(instance({ imageRef: '' }), extra({ image: { id: 'img2' } }), v('2.1'), CTX, USER).image).toEqual({ id: 'img2', links: [{ rel: 'bookmark', href: 'http://h/compute/images/img2' }] });
  });
});

describe('helpers', () => {
  test('generate_hostid', () => {
    expect(generateHostId('cmp1', 'proj1')).toBe(sha224('proj1cmp1'));
    expect(generateHostId('cmp1', 'proj1')).toHaveLength(56);
    expect(generateHostId(null, 'proj1')).toBe('');
  });
  test.each([
    ['new-server-test', 'new-server-test'],
    ['My Server_1.test', 'my-server-1-test'],
    ['..a$b!c--', 'abc'],
    ['日本', ''],
  ])('sanitize_hostname(%j) = %j', (input, out) => {
    expect(sanitizeHostname(input)).toBe(out);
  });
  test('an unusable name falls back to Server-<uuid>', () => {
    const s = serverDetail(instance({ name: '日本' }), extra(), v('2.3'), CTX, ADMIN);
    expect(s['OS-EXT-SRV-ATTR:hostname']).toBe(`Server-${UUID}`);
  });
});

describe('volume attachments', () => {
  const b = bdm();
  test.each<[string, Record<string, unknown>]>([
    ['2.1', { id: VOL, volumeId: VOL, serverId: UUID, device: '/dev/vdb' }],
    ['2.69', { id: VOL, volumeId: VOL, serverId: UUID, device: '/dev/vdb' }],
    ['2.70', { id: VOL, volumeId: VOL, serverId: UUID, device: '/dev/vdb', tag: 'data' }],
    ['2.78', { id: VOL, volumeId: VOL, serverId: UUID, device: '/dev/vdb', tag: 'data' }],
    ['2.79', { id: VOL, volumeId: VOL, serverId: UUID, device: '/dev/vdb', tag: 'data', delete_on_termination: true }],
    ['2.88', { id: VOL, volumeId: VOL, serverId: UUID, device: '/dev/vdb', tag: 'data', delete_on_termination: true }],
    ['2.89', { volumeId: VOL, serverId: UUID, device: '/dev/vdb', tag: 'data', delete_on_termination: true, attachment_id: 'a0000000-0000-4000-8000-000000000001', bdm_uuid: 'b0000000-0000-4000-8000-000000000001' }],
  ])('at %s', (ver, body) => {
    expect(volumeAttachmentView(b, UUID, v(ver))).toEqual(body);
  });
  test('no device name: no device key; null tag still shown', () => {
    const d = volumeAttachmentView(bdm({ deviceName: null, tag: null }), UUID, v('2.70'));
    expect(d).not.toHaveProperty('device');
    expect(d.tag).toBeNull();
  });
  test('create response: device always present, no 2.89 ids', () => {
    const att = { volumeId: VOL, device: null, tag: null, deleteOnTermination: false };
    expect(volumeAttachmentCreateView(att, UUID, v('2.1'))).toEqual({ id: VOL, serverId: UUID, volumeId: VOL, device: null });
    expect(volumeAttachmentCreateView(att, UUID, v('2.93'))).toEqual({ id: VOL, serverId: UUID, volumeId: VOL, device: null, tag: null, delete_on_termination: false });
  });
});

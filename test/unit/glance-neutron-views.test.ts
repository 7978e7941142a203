/**
 * The pure parts of the image and network APIs: Glance's create and JSON-patch checks (what is
 * refused, with which status, and that a refusal leaves the image as it was), and the subnet
 * Neutron shows for a network (the pool is exactly the addresses ports are given).
 */
import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import { applyPatch, parseCreate } from '../../functions/images/validation.js';
import { imageView } from '../../functions/images/views.js';
import { subnetView } from '../../functions/networks/views.js';
import type { Image } from '../../functions/servers/model.js';
import { imageFixture } from '../support/image-fixtures.js';

const image: Image = imageFixture({ properties: { os_distro: 'cirros' }, objectKey: 'images/x' });

const statusOf = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    if (e instanceof FerryError) return e.status;
    throw e;
  }
  return 'accepted';
};

describe('Glance create', () => {
  test('defaults, extra properties, and refusals', () => {
    expect(parseCreate({ name: 'a', hw_disk_bus: 'virtio' })).toMatchObject({ name: 'a', visibility: 'shared', properties: { hw_disk_bus: 'virtio' } });
    expect(statusOf(() => parseCreate({ name: 'a', size: 3 }))).toBe(403);
    expect(statusOf(() => parseCreate({ disk_format: 'exe' }))).toBe(400);
    expect(statusOf(() => parseCreate({ id: 'not-a-uuid' }))).toBe(400);
    expect(statusOf(() => parseCreate({ extra: 5 }))).toBe(400);
    expect(statusOf(() => parseCreate([]))).toBe(400);
  });
});

describe('Glance JSON patch', () => {
  test('applies add, replace, remove in order', () => {
    const next = applyPatch(image, [
      { op: 'replace', path: '/name', value: 'n' },
      { op: 'add', path: '/k', value: 'v' },
      { op: 'remove', path: '/os_distro' },
      { op: 'replace', path: '/tags', value: ['t', 't'] },
    ]);
    expect(next).toMatchObject({ name: 'n', properties: { k: 'v' }, tags: ['t'] });
    expect(image.properties).toEqual({ os_distro: 'cirros' });
  });

  test.each([
    [[{ op: 'replace', path: '/status', value: 'active' }], 403],
    [[{ op: 'remove', path: '/name' }], 403],
    [[{ op: 'remove', path: '/nothing' }], 409],
    [[{ op: 'move', path: '/name', value: 'x' }], 400],
    [[{ op: 'replace', path: '/min_ram', value: -1 }], 400],
    [[{ op: 'replace', path: '/name' }], 400],
    [{ op: 'replace', path: '/name', value: 'x' }, 400],
  ])('%j is refused with %i', (ops, status) => {
    expect(statusOf(() => applyPatch(image, ops))).toBe(status);
  });

  test('the formats are fixed once the image has data', () => {
    expect(applyPatch(image, [{ op: 'replace', path: '/disk_format', value: 'qcow2' }]).diskFormat).toBe('qcow2');
    expect(statusOf(() => applyPatch({ ...image, status: 'active' }, [{ op: 'replace', path: '/disk_format', value: 'qcow2' }]))).toBe(403);
  });

  test('the view flattens properties and shows no checksum before data', () => {
    expect(imageView(image)).toMatchObject({ os_distro: 'cirros', checksum: null, size: null, owner: 'demo', self: `/v2/images/${image.id}` });
  });
});

describe('Neutron subnet', () => {
  test('gateway .1, pool from .2 to the address before the broadcast', () => {
    const s = subnetView({ id: 'n1', name: 'private', cidr: '10.1.2.0/24', createdAt: '2026-01-01T00:00:00.000Z' });
    expect(s).toMatchObject({ cidr: '10.1.2.0/24', gateway_ip: '10.1.2.1', allocation_pools: [{ start: '10.1.2.2', end: '10.1.2.254' }], network_id: 'n1' });
  });
});

/**
 * Glance v2 at /image and Neutron v2.0 at /network over HTTP on a local stack (DynamoDB Local,
 * s3rver): an upload/download round trip with Glance's checksums, member vs admin visibility,
 * refusals with Glance's and Neutron's error bodies that change nothing (the compute-api table and
 * the bucket's images/ compared before and after), Neutron's filters, and the ports of a server.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { scanAll } from '../../functions/core/db.js';
import { bucket, s3 } from '../../functions/core/s3.js';
import { tableName } from '../../functions/core/tables.js';
import { SANDBOX_NETWORK } from '../../functions/compute/seed.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { subnetIdOf } from '../../functions/servers/network.js';
import { chooseBootableImage, glanceImages, imageHead } from '../../scripts/smoke/images.js';
import { diffSnapshots, stableJson, type Snapshot } from '../support/api-state.js';
import { bootServer, novaClient, settled } from '../support/nova.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => stack?.stop());

const DEMO = 'demo:demo';
const OTHER = 'other:other';
const ADMIN = 'admin:admin';

async function call(method: string, path: string, opts: { token?: string; json?: unknown; body?: Buffer; type?: string; accept?: string } = {}) {
  const headers: Record<string, string> = {};
  if (opts.token !== undefined) headers['X-Auth-Token'] = opts.token;
  if (opts.accept) headers.Accept = opts.accept;
  let body: string | Buffer | undefined;
  if (opts.json !== undefined) {
    body = JSON.stringify(opts.json);
    headers['Content-Type'] = opts.type ?? 'application/json';
  } else if (opts.body) {
    body = opts.body;
    headers['Content-Type'] = opts.type ?? 'application/octet-stream';
  }
  const res = await fetch(stack.url + path, { method, headers, body });
  const bytes = Buffer.from(await res.arrayBuffer());
  let parsed: any;
  try {
    parsed = JSON.parse(bytes.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, bytes, text: bytes.toString('utf8'), body: parsed };
}

/** The compute-api table and the bucket's image objects. */
async function snapshot(): Promise<Snapshot> {
  const snap: Snapshot = new Map();
  for (const item of await scanAll({ TableName: tableName('compute-api'), ConsistentRead: true })) snap.set(`table ${String(item.pk)}|${String(item.sk)}`, stableJson(item));
  const out = await (await s3()).send(new ListObjectsV2Command({ Bucket: bucket(), Prefix: 'images/' }));
  for (const o of out.Contents ?? []) snap.set(`s3 ${o.Key}`, `${o.Size} ${o.ETag}`);
  return snap;
}

async function unchangedBy(request: () => Promise<unknown>): Promise<void> {
  const before = await snapshot();
  await request();
  expect(diffSnapshots(before, await snapshot())).toEqual([]);
}

const PATCH = 'application/openstack-images-v2.1-json-patch';

describe('Glance v2', () => {
  test('version discovery is public and lists v2 as CURRENT', async () => {
    const root = await call('GET', '/image');
    expect(root.status).toBe(300);
    expect(root.body.versions[0]).toMatchObject({ status: 'CURRENT', links: [{ rel: 'self', href: `${stack.url}/image/v2/` }] });
    expect((await call('GET', '/image/versions')).status).toBe(200);
    expect((await call('GET', '/image/v2/images')).status).toBe(401);
  });

  test('create, upload, download round trip with checksum, os_hash_value and size', async () => {
    const data = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7919) % 251));
    const created = await call('POST', '/image/v2/images', { token: DEMO, json: { name: 'rt', disk_format: 'qcow2', container_format: 'bare', os_distro: 'cirros' } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'rt', status: 'queued', visibility: 'shared', owner: 'demo', os_distro: 'cirros', size: null, checksum: null });
    const id = created.body.id as string;
    expect((await call('PUT', `/image/v2/images/${id}/file`, { token: DEMO, body: data })).status).toBe(204);
    const shown = await call('GET', `/image/v2/images/${id}`, { token: DEMO });
    expect(shown.body).toMatchObject({
      status: 'active',
      size: data.length,
      checksum: createHash('md5').update(data).digest('hex'),
      os_hash_algo: 'sha512',
      os_hash_value: createHash('sha512').update(data).digest('hex'),
    });
    const down = await call('GET', `/image/v2/images/${id}/file`, { token: DEMO });
    expect(down.status).toBe(200);
    expect(down.headers.get('content-md5')).toBe(shown.body.checksum);
    expect(down.bytes.equals(data)).toBe(true);
    // The data of an active image is not replaced.
    await unchangedBy(async () => expect((await call('PUT', `/image/v2/images/${id}/file`, { token: DEMO, body: Buffer.from('other') })).status).toBe(409));
    expect((await call('DELETE', `/image/v2/images/${id}`, { token: DEMO })).status).toBe(204);
    expect((await call('GET', `/image/v2/images/${id}`, { token: DEMO })).status).toBe(404);
    expect((await snapshot()).has(`s3 images/${id}`)).toBe(false);
  });

  test('visibility: a member sees public, community and its own images; an admin sees all; others 404', async () => {
    const mine = (await call('POST', '/image/v2/images', { token: DEMO, json: { name: `private-${randomUUID()}`, visibility: 'private' } })).body;
    const community = (await call('POST', '/image/v2/images', { token: DEMO, json: { name: `community-${randomUUID()}`, visibility: 'community' } })).body;
    const names = async (token: string, query = '') => ((await call('GET', `/image/v2/images${query}`, { token })).body.images as { name: string }[]).map((i) => i.name);
    expect(await names(DEMO)).toEqual(expect.arrayContaining([mine.name, community.name, 'cirros-tiny']));
    expect(await names(OTHER)).toContain('cirros-tiny');
    expect(await names(OTHER)).not.toContain(mine.name);
    // Community images are not in another project's default list, but are with visibility=community and by id.
    expect(await names(OTHER)).not.toContain(community.name);
    expect(await names(OTHER, '?visibility=community')).toContain(community.name);
    expect((await call('GET', `/image/v2/images/${community.id}`, { token: OTHER })).status).toBe(200);
    expect(await names(ADMIN)).toContain(mine.name);
    const hidden = await call('GET', `/image/v2/images/${mine.id}`, { token: OTHER, accept: 'application/json' });
    expect(hidden.status).toBe(404);
    expect(hidden.body).toEqual({ message: `No image found with ID ${mine.id}`, code: '404 Not Found', title: 'Not Found' });
    expect((await call('GET', `/image/v2/images?name=cirros-tiny`, { token: OTHER })).body.images.map((i: { id: string }) => i.id)).toEqual([SANDBOX_IMAGES.cirrosTiny.id]);
  });

  test('refusals change nothing and carry Glance\'s bodies', async () => {
    const img = (await call('POST', '/image/v2/images', { token: DEMO, json: { name: 'guarded' } })).body;
    const refusals: [string, () => ReturnType<typeof call>, number][] = [
      ['read-only attribute on create', () => call('POST', '/image/v2/images', { token: DEMO, json: { name: 'x', status: 'active' } }), 403],
      ['bad disk_format', () => call('POST', '/image/v2/images', { token: DEMO, json: { name: 'x', disk_format: 'exe' } }), 400],
      ['member makes an image public', () => call('POST', '/image/v2/images', { token: DEMO, json: { name: 'x', visibility: 'public' } }), 403],
      ['malformed JSON', () => call('POST', '/image/v2/images', { token: DEMO, json: undefined, body: Buffer.from('{'), type: 'application/json' }), 400],
      ['PATCH without the json-patch type', () => call('PATCH', `/image/v2/images/${img.id}`, { token: DEMO, json: [{ op: 'replace', path: '/name', value: 'n' }] }), 415],
      ['PATCH of a read-only attribute', () => call('PATCH', `/image/v2/images/${img.id}`, { token: DEMO, type: PATCH, json: [{ op: 'replace', path: '/size', value: 1 }] }), 403],
      ['PATCH by another project', () => call('PATCH', `/image/v2/images/${img.id}`, { token: OTHER, type: PATCH, json: [{ op: 'replace', path: '/name', value: 'n' }] }), 404],
      ['PATCH to public by a member', () => call('PATCH', `/image/v2/images/${img.id}`, { token: DEMO, type: PATCH, json: [{ op: 'replace', path: '/visibility', value: 'public' }] }), 403],
      ['public image changed by a member', () => call('PATCH', `/image/v2/images/${SANDBOX_IMAGES.cirrosTiny.id}`, { token: DEMO, type: PATCH, json: [{ op: 'replace', path: '/name', value: 'n' }] }), 403],
      ['public image deleted by a member', () => call('DELETE', `/image/v2/images/${SANDBOX_IMAGES.cirrosTiny.id}`, { token: DEMO }), 403],
      ['upload as text', () => call('PUT', `/image/v2/images/${img.id}/file`, { token: DEMO, body: Buffer.from('abc'), type: 'text/plain' }), 415],
      ['upload by another project', () => call('PUT', `/image/v2/images/${img.id}/file`, { token: OTHER, body: Buffer.from('abc') }), 404],
      ['unknown path', () => call('GET', '/image/v2/nothing', { token: DEMO }), 404],
    ];
    for (const [what, request, status] of refusals) {
      await unchangedBy(async () => {
        const res = await request();
        expect(res.status, what).toBe(status);
        // Without Accept: application/json, webob's plain-text page: "<code> <title>\n\n<message>".
        expect(res.text, what).toMatch(new RegExp(`^${status} [A-Z]`));
      });
    }
  });

  test('PATCH applies name, tags and properties; protected images refuse delete', async () => {
    const img = (await call('POST', '/image/v2/images', { token: DEMO, json: { name: 'p' } })).body;
    const patched = await call('PATCH', `/image/v2/images/${img.id}`, {
      token: DEMO,
      type: PATCH,
      json: [
        { op: 'replace', path: '/name', value: 'renamed' },
        { op: 'add', path: '/hw_disk_bus', value: 'virtio' },
        { op: 'replace', path: '/tags', value: ['a', 'b'] },
        { op: 'replace', path: '/protected', value: true },
      ],
    });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ name: 'renamed', hw_disk_bus: 'virtio', tags: ['a', 'b'], protected: true });
    expect((await call('GET', '/image/v2/images?name=renamed', { token: DEMO })).body.images).toHaveLength(1);
    await unchangedBy(async () => expect((await call('DELETE', `/image/v2/images/${img.id}`, { token: DEMO })).status).toBe(403));
    await call('PATCH', `/image/v2/images/${img.id}`, { token: DEMO, type: PATCH, json: [{ op: 'replace', path: '/protected', value: false }] });
    expect((await call('DELETE', `/image/v2/images/${img.id}`, { token: DEMO })).status).toBe(204);
  });

  test('an image over the front door\'s 10 MiB: PUT refused with 413, web-download import streams it in', async () => {
    const big = Buffer.alloc(12 * 1024 * 1024, 7);
    for (let i = 0; i < big.length; i += 4096) big[i] = i % 251;
    const source = createServer((req, res) => {
      // A redirect to a link-local address (where cloud metadata answers): refused at the hop.
      if (req.url === '/to-metadata') res.writeHead(302, { Location: 'http://169.254.169.254/latest/meta-data/' }).end();
      else if (req.url === '/moved') res.writeHead(301, { Location: '/big.img' }).end();
      else {
        res.writeHead(200, { 'Content-Length': String(big.length), 'Content-Type': 'application/octet-stream' });
        res.end(big);
      }
    });
    await new Promise<void>((r) => source.listen(0, '127.0.0.1', r));
    const port = (source.address() as AddressInfo).port;
    const importFrom = (id: string, uri: string) => call('POST', `/image/v2/images/${id}/import`, { token: DEMO, json: { method: { name: 'web-download', uri } } });
    const savedPorts = process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS;
    try {
      const img = (await call('POST', '/image/v2/images', { token: DEMO, json: { name: 'big', disk_format: 'raw', container_format: 'bare' } })).body;
      await unchangedBy(async () => expect((await call('PUT', `/image/v2/images/${img.id}/file`, { token: DEMO, body: big })).status).toBe(413));
      expect((await call('GET', '/image/v2/info/import', { token: DEMO })).body['import-methods'].value).toEqual(['web-download']);
      await unchangedBy(async () =>
        expect((await call('POST', `/image/v2/images/${img.id}/import`, { token: DEMO, json: { method: { name: 'web-download', uri: 'file:///etc/passwd' } } })).status).toBe(400),
      );
      const uri = `http://127.0.0.1:${port}/big.img`;
      // Glance's default filter: ports 80 and 443 only, until the operator allows another.
      await unchangedBy(async () => expect(await importFrom(img.id, uri)).toMatchObject({ status: 400, text: expect.stringMatching(/port \d+ is not allowed/) }));
      process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = `80,443,${port}`;
      await unchangedBy(async () => expect(await importFrom(img.id, `http://127.0.0.1:${port}/to-metadata`)).toMatchObject({ status: 400, text: expect.stringMatching(/redirected to http:\/\/169\.254\.169\.254\/.*link-local/) }));
      expect((await importFrom(img.id, `http://127.0.0.1:${port}/moved`)).status).toBe(202);
      // The import runs in the image-import machine (test/integration/image-import.test.ts): active once it ends.
      const shown = await eventually(async (note) => {
        const body = (await call('GET', `/image/v2/images/${img.id}`, { token: DEMO })).body;
        return note(body.status) === 'active' ? body : undefined;
      }, `image ${img.id} active`);
      expect(shown).toMatchObject({ status: 'active', size: big.length, checksum: createHash('md5').update(big).digest('hex') });
      // A second import of an active image is refused.
      expect((await call('POST', `/image/v2/images/${img.id}/import`, { token: DEMO, json: { method: { name: 'web-download', uri } } })).status).toBe(409);
      expect((await call('DELETE', `/image/v2/images/${img.id}`, { token: DEMO })).status).toBe(204);
    } finally {
      if (savedPorts === undefined) delete process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS;
      else process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = savedPorts;
      await new Promise((r) => source.close(r));
    }
  }, 60_000);

  test('pagination follows next links without repeats', async () => {
    const seen: string[] = [];
    let next: string | undefined = '/v2/images?limit=1';
    while (next) {
      const page: any = (await call('GET', `/image${next}`, { token: ADMIN })).body;
      seen.push(...page.images.map((i: { id: string }) => i.id));
      next = page.next;
    }
    const all = (await call('GET', '/image/v2/images?limit=1000', { token: ADMIN })).body.images.map((i: { id: string }) => i.id);
    expect(seen).toEqual(all);
  });

  test("the smoke's server check passes over a qcow2 image whose data is not qcow2, listed first, for a sandbox image", async () => {
    // Prepare: as the aws-docs run's imported image was, but named to sort before every other.
    const created = await call('POST', '/image/v2/images', { token: ADMIN, json: { name: '0-filler', disk_format: 'qcow2', container_format: 'bare' } });
    const id = created.body.id as string;
    try {
      expect((await call('PUT', `/image/v2/images/${id}/file`, { token: ADMIN, body: Buffer.alloc(64 * 1024, 7) })).status).toBe(204);
      const target = { api: `${stack.url}/`, token: ADMIN, project: 'admin' };

      // Act: the smoke's own listing and reads over HTTP.
      const images = await glanceImages(target);
      const choice = await chooseBootableImage(images, 1, (imageId) => imageHead(target, imageId));

      // Assess
      expect(images[0]!.id).toBe(id);
      expect(choice?.passedOver[0]).toBe('0-filler (disk_format qcow2, but its data is not qcow2)');
      expect(choice?.image).toMatchObject({ status: 'active', disk_format: 'raw' });
      expect(images.map((i) => i.name)).toContain(SANDBOX_IMAGES.cirrosTiny.name);
    } finally {
      await call('DELETE', `/image/v2/images/${id}`, { token: ADMIN });
    }
  });
});

describe('Neutron v2.0', () => {
  test('version discovery, networks with name/id/fields filters, the subnet', async () => {
    expect((await call('GET', '/network')).body.versions[0]).toMatchObject({ id: 'v2.0', status: 'CURRENT' });
    const byName = await call('GET', `/network/v2.0/networks?name=${SANDBOX_NETWORK.name}`, { token: DEMO });
    expect(byName.body.networks).toHaveLength(1);
    const net = byName.body.networks[0];
    expect(net).toMatchObject({ id: SANDBOX_NETWORK.id, shared: true, status: 'ACTIVE', subnets: [subnetIdOf(SANDBOX_NETWORK.id)] });
    expect((await call('GET', '/network/v2.0/networks?name=nope', { token: DEMO })).body.networks).toEqual([]);
    expect((await call('GET', `/network/v2.0/networks?id=${net.id}&fields=id&fields=name`, { token: DEMO })).body.networks).toEqual([{ id: net.id, name: net.name }]);
    const subnet = (await call('GET', `/network/v2.0/subnets/${subnetIdOf(net.id)}`, { token: DEMO })).body.subnet;
    expect(subnet).toMatchObject({ network_id: net.id, cidr: SANDBOX_NETWORK.cidr, ip_version: 4 });
    expect(subnet.gateway_ip).toMatch(/\.1$/);
  });

  test('refusals carry NeutronError and change nothing', async () => {
    const cases: [() => ReturnType<typeof call>, number, string][] = [
      [() => call('GET', '/network/v2.0/networks/private', { token: DEMO }), 404, 'NetworkNotFound'],
      [() => call('GET', '/network/v2.0/ports/nope', { token: DEMO }), 404, 'PortNotFound'],
      [() => call('GET', '/network/v2.0/networks?bogus=1', { token: DEMO }), 400, 'HTTPBadRequest'],
      [() => call('POST', '/network/v2.0/networks', { token: ADMIN, json: { network: { name: 'n' } } }), 405, 'HTTPMethodNotAllowed'],
      [() => call('DELETE', `/network/v2.0/networks/${SANDBOX_NETWORK.id}`, { token: ADMIN }), 405, 'HTTPMethodNotAllowed'],
    ];
    for (const [request, status, type] of cases) {
      await unchangedBy(async () => {
        const res = await request();
        expect(res.status).toBe(status);
        expect(res.body.NeutronError).toMatchObject({ type });
      });
    }
  });

  test('a server\'s port: filters device_id, network_id, fixed_ips; a member sees only its project\'s', async () => {
    const nova = novaClient(stack, { token: DEMO });
    const server = await bootServer(nova, { name: 'net1', token: DEMO });
    await settled(nova, server);
    const ports = (await call('GET', `/network/v2.0/ports?device_id=${server}&network_id=${SANDBOX_NETWORK.id}`, { token: DEMO })).body.ports;
    expect(ports).toHaveLength(1);
    expect(ports[0]).toMatchObject({ device_id: server, device_owner: 'compute:nova', network_id: SANDBOX_NETWORK.id });
    expect(ports[0]['binding:host_id']).toBeUndefined();
    const ip = ports[0].fixed_ips[0].ip_address as string;
    expect((await call('GET', `/network/v2.0/ports?fixed_ips=ip_address%3D${ip}`, { token: DEMO })).body.ports.map((p: { id: string }) => p.id)).toEqual([ports[0].id]);
    expect((await call('GET', `/network/v2.0/ports?device_id=${server}`, { token: OTHER })).body.ports).toEqual([]);
    const asAdmin = (await call('GET', `/network/v2.0/ports/${ports[0].id}`, { token: ADMIN })).body.port;
    expect(asAdmin['binding:host_id']).toBeTruthy();
    expect((await call('GET', `/network/v2.0/ports/${ports[0].id}`, { token: OTHER })).status).toBe(404);
  }, 120_000);
});

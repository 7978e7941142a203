/**
 * The Cinder API gaps Tempest found (issue 15), through the embedded local stack over HTTP and the
 * upstream `cinder` CLI: which attributes each call answers (create vs show/detail for volumes,
 * snapshots and types, per caller), version discovery at `/v3/`, unknown paths, and the qos-specs
 * API. Each expectation is upstream's (C/api/v3/views, C/api/contrib/*), cited where it is made.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cinderCli, parseListTable, parsePropertyTable } from '../support/cli.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => stack?.stop());

const ADMIN = 'admin:admin';
const DEMO = 'demo:demo';

async function api(method: string, path: string, body?: unknown, token: string | null = DEMO, version = '3.70') {
  const res = await fetch(`${stack.url}/volume/v3${path}`, {
    method,
    redirect: 'manual',
    headers: {
      ...(token ? { 'X-Auth-Token': token } : {}),
      'OpenStack-API-Version': `volume ${version}`,
      Accept: 'application/json',
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const cinder = (token: string, ...args: string[]) => {
  const [user, project] = token.split(':') as [string, string];
  return cinderCli(`${stack.url}/volume/v3`, user, project, args);
};

async function availableVolume(name: string, token = DEMO): Promise<Record<string, any>> {
  const created = await api('POST', '/volumes', { volume: { size: 1, name } }, token);
  expect(created.status).toBe(202);
  return eventually(async (note) => {
    const v = (await api('GET', `/volumes/${created.body.volume.id}`, undefined, token)).body.volume;
    return ['available', 'error'].includes(note(v.status)) ? v : undefined;
  }, `volume ${name} settled`);
}

describe('create answers without the extension attributes; show and detail carry them', () => {
  test('volume: POST has no os-vol-* key (the extensions hook show and detail only); GET has them', async () => {
    for (const token of [DEMO, ADMIN]) {
      const created = await api('POST', '/volumes', { volume: { size: 1, name: `shape-${token}` } }, token);
      expect(created.status).toBe(202);
      expect(Object.keys(created.body.volume).filter((k) => k.startsWith('os-vol-'))).toEqual([]);
      const v = await eventually(async () => {
        const got = (await api('GET', `/volumes/${created.body.volume.id}`, undefined, token)).body.volume;
        return got.status === 'available' ? got : undefined;
      }, 'available');
      expect(v['os-vol-tenant-attr:tenant_id']).toBe(token.split(':')[1]);
      expect('os-vol-host-attr:host' in v).toBe(token === ADMIN);
      const detail = (await api('GET', '/volumes/detail', undefined, token)).body.volumes.find((x: any) => x.id === v.id);
      expect(detail['os-vol-tenant-attr:tenant_id']).toBe(token.split(':')[1]);
      // update (C/api/v3/volumes.py update) is the plain detail view too
      const updated = await api('PUT', `/volumes/${v.id}`, { volume: { description: 'd' } }, token);
      expect(updated.status).toBe(200);
      expect(Object.keys(updated.body.volume).filter((k) => k.startsWith('os-vol-'))).toEqual([]);
    }
  });

  test('snapshot: POST is the v3 detail view without os-extended-snapshot-attributes; show and /detail have them, the plain list neither', async () => {
    const v = await availableVolume('snap-shape');
    const created = await api('POST', '/snapshots', { snapshot: { volume_id: v.id, name: 's1' } });
    expect(created.status).toBe(202);
    expect(Object.keys(created.body.snapshot).sort()).toEqual(
      ['consumes_quota', 'created_at', 'description', 'group_snapshot_id', 'id', 'metadata', 'name', 'size', 'status', 'updated_at', 'user_id', 'volume_id'].sort(),
    );
    const id = created.body.snapshot.id;
    const shown = (await api('GET', `/snapshots/${id}`)).body.snapshot;
    expect(shown).toMatchObject({ 'os-extended-snapshot-attributes:project_id': 'demo', user_id: 'demo', group_snapshot_id: null });
    const detail = (await api('GET', '/snapshots/detail')).body.snapshots.find((s: any) => s.id === id);
    expect(detail['os-extended-snapshot-attributes:project_id']).toBe('demo');
    const listed = (await api('GET', '/snapshots')).body.snapshots.find((s: any) => s.id === id);
    expect(Object.keys(listed).sort()).toEqual(['created_at', 'description', 'id', 'metadata', 'name', 'size', 'status', 'updated_at', 'volume_id'].sort());
    expect((await api('DELETE', `/snapshots/${id}`)).status).toBe(202);
  });
});

describe('volume type views per call (tempest volume_types schemas)', () => {
  test('create: base view + os-volume-type-access:is_public, no qos_specs_id; update: base view only; show and list: qos_specs_id for admins only', async () => {
    const created = await api('POST', '/types', { volume_type: { name: 'shape-type', extra_specs: { volume_backend_name: 'lvm-a' } } }, ADMIN);
    expect(created.status).toBe(200);
    const id = created.body.volume_type.id;
    expect(created.body).toEqual({
      volume_type: { id, name: 'shape-type', is_public: true, extra_specs: { volume_backend_name: 'lvm-a' }, description: null, 'os-volume-type-access:is_public': true },
    });
    const updated = await api('PUT', `/types/${id}`, { volume_type: { description: 'x' } }, ADMIN);
    expect(updated.body).toEqual({ volume_type: { id, name: 'shape-type', is_public: true, extra_specs: { volume_backend_name: 'lvm-a' }, description: 'x' } });
    const shownAdmin = (await api('GET', `/types/${id}`, undefined, ADMIN)).body.volume_type;
    expect(shownAdmin).toEqual({ id, name: 'shape-type', is_public: true, description: 'x', extra_specs: { volume_backend_name: 'lvm-a' }, qos_specs_id: null, 'os-volume-type-access:is_public': true });
    const shownDemo = (await api('GET', `/types/${id}`)).body.volume_type;
    expect(shownDemo).not.toHaveProperty('qos_specs_id');
    const listedDemo = (await api('GET', '/types')).body.volume_types.find((t: any) => t.id === id);
    expect(listedDemo).not.toHaveProperty('qos_specs_id');
    expect((await api('GET', '/types', undefined, ADMIN)).body.volume_types.find((t: any) => t.id === id)).toHaveProperty('qos_specs_id', null);
    // cinder type-create prints the create answer as it comes
    const cli = await cinder(ADMIN, 'type-create', 'shape-type-cli');
    expect(cli.code, cli.stderr).toBe(0);
    expect(parseListTable(cli.stdout)[0]).toMatchObject({ Name: 'shape-type-cli', Is_Public: 'True' });
  });
});

describe('version discovery and unknown paths', () => {
  test('GET /volume/v3/ lists the versions with 200; /volume/v3 redirects there; unknown paths 404', async () => {
    const listed = await api('GET', '/', undefined, null);
    expect(listed.status).toBe(200);
    expect(listed.body.versions.map((v: any) => [v.id, v.version])).toEqual([['v3.0', '3.70']]);
    const bare = await fetch(`${stack.url}/volume/v3`, { redirect: 'manual' });
    expect([bare.status, bare.headers.get('location')]).toEqual([302, `${stack.url}/volume/v3/`]);
    // '/volumes/': a trailing slash past the version root (Tempest: show with an empty id).
    for (const path of ['/foo', '/foo/', '/demo/foo', '/volumes/']) {
      const res = await api('GET', path);
      expect({ path, status: res.status, body: res.body }).toEqual({ path, status: 404, body: { itemNotFound: { code: 404, message: 'The resource could not be found.' } } });
    }
    // cinderclient's discovery (GET <root>/) still works: a plain list succeeds
    const list = await cinder(DEMO, 'list');
    expect(list.code, list.stderr).toBe(0);
  });
});

describe('qos-specs (C/api/contrib/qos_specs_manage.py)', () => {
  test('create, show, list, set and unset keys, associate with a type (the type shows it), refuse delete in use, force delete', async () => {
    const created = await api('POST', '/qos-specs', { qos_specs: { name: ' gold ', consumer: 'front-end', read_iops_sec: '100' } }, ADMIN);
    expect(created.status).toBe(200);
    const id = created.body.qos_specs.id;
    expect(created.body.qos_specs).toEqual({ id, name: 'gold', consumer: 'front-end', specs: { read_iops_sec: '100' } });
    expect(created.body.links).toContainEqual({ rel: 'self', href: `${stack.url}/volume/v3/admin/qos-specs/${id}` });
    expect((await api('POST', '/qos-specs', { qos_specs: { name: 'gold' } }, ADMIN))).toMatchObject({ status: 409, body: { conflictingRequest: { message: 'QoS Specs gold already exists.' } } });
    expect((await api('POST', '/qos-specs', { qos_specs: { name: 'x', consumer: 'nowhere' } }, ADMIN)).status).toBe(400);
    expect((await api('POST', '/qos-specs', { qos_specs: { name: '   ' } }, ADMIN)).body.badRequest.message).toBe("An invalid 'name' value was provided. The 'name' can not be empty.");
    expect((await api('GET', '/qos-specs', undefined, ADMIN)).body.qos_specs.map((s: any) => s.name)).toEqual(['gold']);
    expect((await api('GET', `/qos-specs/${id}`, undefined, DEMO)).status).toBe(403);

    const set = await api('PUT', `/qos-specs/${id}`, { qos_specs: { write_iops_sec: '50', consumer: 'both' } }, ADMIN);
    expect(set).toMatchObject({ status: 200, body: { qos_specs: { write_iops_sec: '50', consumer: 'both' } } });
    expect((await api('PUT', `/qos-specs/${id}/delete_keys`, { keys: ['read_iops_sec', 'nope'] }, ADMIN))).toMatchObject({ status: 404, body: { itemNotFound: { message: `QoS spec ${id} has no spec with key nope.` } } });
    expect((await api('GET', `/qos-specs/${id}`, undefined, ADMIN)).body.qos_specs).toMatchObject({ consumer: 'both', specs: { read_iops_sec: '100', write_iops_sec: '50' } });
    expect((await api('PUT', `/qos-specs/${id}/delete_keys`, { keys: ['read_iops_sec'] }, ADMIN)).status).toBe(202);
    expect((await api('GET', `/qos-specs/${id}`, undefined, ADMIN)).body.qos_specs.specs).toEqual({ write_iops_sec: '50' });

    const type = (await api('POST', '/types', { volume_type: { name: 'qos-type' } }, ADMIN)).body.volume_type;
    expect((await api('GET', `/qos-specs/${id}/associate`, undefined, ADMIN)).body.badRequest.message).toBe('Volume Type id must not be None.');
    expect((await api('GET', `/qos-specs/${id}/associate?vol_type_id=${type.id}`, undefined, ADMIN)).status).toBe(202);
    expect((await api('GET', `/types/${type.id}`, undefined, ADMIN)).body.volume_type.qos_specs_id).toBe(id);
    expect((await api('GET', `/qos-specs/${id}/associations`, undefined, ADMIN)).body).toEqual({ qos_associations: [{ association_type: 'volume_type', name: 'qos-type', id: type.id }] });
    const other = (await api('POST', '/qos-specs', { qos_specs: { name: 'silver' } }, ADMIN)).body.qos_specs.id;
    expect((await api('GET', `/qos-specs/${other}/associate?vol_type_id=${type.id}`, undefined, ADMIN)).body.badRequest.message).toBe(
      `Invalid volume type: Type ${type.id} is already associated with another qos specs: ${id}`,
    );
    // In use: refused, and nothing changed.
    expect((await api('DELETE', `/qos-specs/${id}`, undefined, ADMIN))).toMatchObject({ status: 400, body: { badRequest: { message: 'Qos specs still in use.' } } });
    expect((await api('GET', `/types/${type.id}`, undefined, ADMIN)).body.volume_type.qos_specs_id).toBe(id);
    expect((await api('GET', `/qos-specs/${id}/disassociate?vol_type_id=${type.id}`, undefined, ADMIN)).status).toBe(202);
    expect((await api('GET', `/types/${type.id}`, undefined, ADMIN)).body.volume_type.qos_specs_id).toBeNull();
    expect((await api('GET', `/qos-specs/${id}/associate?vol_type_id=${type.id}`, undefined, ADMIN)).status).toBe(202);
    expect((await api('DELETE', `/qos-specs/${id}?force=True`, undefined, ADMIN)).status).toBe(202);
    expect((await api('GET', `/types/${type.id}`, undefined, ADMIN)).body.volume_type.qos_specs_id).toBeNull();
    expect((await api('GET', `/qos-specs/${id}`, undefined, ADMIN))).toMatchObject({ status: 404, body: { itemNotFound: { message: `No such QoS spec ${id}.` } } });

    // A type deleted while associated takes its association off the spec's count: the spec deletes.
    expect((await api('GET', `/qos-specs/${other}/associate?vol_type_id=${type.id}`, undefined, ADMIN)).status).toBe(202);
    expect((await api('DELETE', `/types/${type.id}`, undefined, ADMIN)).status).toBe(202);
    expect((await api('DELETE', `/qos-specs/${other}`, undefined, ADMIN)).status).toBe(202);
  });

  test('the cinder CLI drives it: qos-create, qos-associate, qos-get-association, qos-list, qos-delete', async () => {
    const created = await cinder(ADMIN, 'qos-create', 'bronze', 'consumer=back-end', 'total_iops_sec=10');
    expect(created.code, created.stderr).toBe(0);
    const spec = parsePropertyTable(created.stdout);
    expect(spec).toMatchObject({ name: 'bronze', consumer: 'back-end' });
    const type = parseListTable((await cinder(ADMIN, 'type-create', 'bronze-type')).stdout)[0]!;
    expect((await cinder(ADMIN, 'qos-associate', spec.id!, type.ID!)).code).toBe(0);
    expect(parseListTable((await cinder(ADMIN, 'qos-get-association', spec.id!)).stdout)).toEqual([{ Association_Type: 'volume_type', Name: 'bronze-type', ID: type.ID }]);
    expect(parseListTable((await cinder(ADMIN, 'qos-list')).stdout).map((r) => r.Name)).toContain('bronze');
    expect((await cinder(ADMIN, 'qos-delete', spec.id!)).code).not.toBe(0);
    expect((await cinder(ADMIN, 'qos-delete', '--force', 'True', spec.id!)).code).toBe(0);
  });
});

describe('volume actions, metadata, paging (C/api/contrib/volume_actions.py, admin_actions.py, C/api/v3/volume_metadata.py)', () => {
  test('os-set_bootable (200) and os-update_readonly_flag (202, shown in metadata); bad values refused, nothing changed', async () => {
    const v = await availableVolume('flags');
    const action = (body: unknown, token = DEMO) => api('POST', `/volumes/${v.id}/action`, body, token);
    expect((await action({ 'os-set_bootable': { bootable: 'maybe' } })).status).toBe(400);
    expect((await action({ 'os-set_bootable': {} })).status).toBe(400);
    expect((await api('GET', `/volumes/${v.id}`)).body.volume.bootable).toBe('false');
    expect(await action({ 'os-set_bootable': { bootable: true } })).toMatchObject({ status: 200, body: undefined });
    expect((await api('GET', `/volumes/${v.id}`)).body.volume.bootable).toBe('true');
    expect((await action({ 'os-update_readonly_flag': { readonly: 'yes please' } })).status).toBe(400);
    expect((await action({ 'os-update_readonly_flag': { readonly: true } })).status).toBe(202);
    expect((await api('GET', `/volumes/${v.id}`)).body.volume.metadata).toEqual({ readonly: 'True' });
    // The CLI's readonly-mode-update sends the same action.
    const cli = await cinder(DEMO, 'readonly-mode-update', v.id, 'False');
    expect(cli.code, cli.stderr).toBe(0);
    expect((await api('GET', `/volumes/${v.id}`)).body.volume.metadata).toEqual({ readonly: 'False' });
    // Not available: refused with upstream's message.
    expect((await action({ 'os-reset_status': { status: 'error' } }, ADMIN)).status).toBe(202);
    expect((await action({ 'os-update_readonly_flag': { readonly: true } })).body.badRequest.message).toBe(
      `Invalid volume: Volume ${v.id} status must be available to update readonly flag, but current status is: error.`,
    );
    expect((await api('GET', `/volumes/${v.id}`)).body.volume.metadata).toEqual({ readonly: 'False' });
  });

  test('os-force_delete: admin only, deletes whatever the status (here a reset to maintenance); a volume with a snapshot is refused', async () => {
    const v = await availableVolume('forced');
    expect((await api('POST', `/volumes/${v.id}/action`, { 'os-force_delete': {} })).status).toBe(403);
    expect((await api('POST', `/volumes/${v.id}/action`, { 'os-reset_status': { status: 'maintenance' } }, ADMIN)).status).toBe(202);
    expect((await api('DELETE', `/volumes/${v.id}`)).status).toBe(400);
    expect((await api('POST', `/volumes/${v.id}/action`, { 'os-force_delete': {} }, ADMIN)).status).toBe(202);
    await eventually(async () => (await api('GET', `/volumes/${v.id}`)).status === 404 || undefined, 'force-deleted volume gone');

    const kept = await availableVolume('kept');
    const snap = (await api('POST', '/snapshots', { snapshot: { volume_id: kept.id } })).body.snapshot;
    const refused = await api('POST', `/volumes/${kept.id}/action`, { 'os-force_delete': {} }, ADMIN);
    expect(refused.status).toBe(400);
    expect((await api('GET', `/volumes/${kept.id}`)).body.volume.status).toBe('available');
    // snapshot os-reset_status: admin only; an unknown status is refused with upstream's list
    expect((await api('POST', `/snapshots/${snap.id}/action`, { 'os-reset_status': { status: 'error' } })).status).toBe(403);
    expect((await api('POST', `/snapshots/${snap.id}/action`, { 'os-reset_status': { status: 'bogus' } }, ADMIN)).body.badRequest.message).toMatch(/^Snapshot status: bogus is invalid, valid statuses are: \('error', 'available'/);
    expect((await api('POST', `/snapshots/${snap.id}/action`, { 'os-reset_status': { status: 'error' } }, ADMIN)).status).toBe(202);
    expect((await api('GET', `/snapshots/${snap.id}`)).body.snapshot.status).toBe('error');
    expect((await api('DELETE', `/snapshots/${snap.id}`)).status).toBe(202);
  });

  test('snapshot os-force_delete: admin only, from any status (here error_deleting after a reset)', async () => {
    const v = await availableVolume('snap-force');
    const snap = (await api('POST', '/snapshots', { snapshot: { volume_id: v.id } })).body.snapshot;
    expect((await api('POST', `/snapshots/${snap.id}/action`, { 'os-force_delete': {} })).status).toBe(403);
    expect((await api('POST', `/snapshots/${snap.id}/action`, { 'os-reset_status': { status: 'error_deleting' } }, ADMIN)).status).toBe(202);
    expect((await api('DELETE', `/snapshots/${snap.id}`)).status).toBe(400);
    expect((await api('POST', `/snapshots/${snap.id}/action`, { 'os-force_delete': {} }, ADMIN)).status).toBe(202);
    expect((await api('GET', `/snapshots/${snap.id}`)).status).toBe(404);
    expect((await api('DELETE', `/volumes/${v.id}`)).status).toBe(202);
  });

  test('GET /volumes/summary (3.12, metadata from 3.36): the caller\'s volumes only', async () => {
    const token = 'summary:summary';
    expect((await api('GET', '/volumes/summary', undefined, token, '3.11')).status).toBe(404);
    const v = await availableVolume('summed', token);
    await api('POST', `/volumes/${v.id}/metadata`, { metadata: { tier: 'gold' } }, token);
    expect((await api('GET', '/volumes/summary', undefined, token, '3.12')).body).toEqual({ 'volume-summary': { total_count: 1, total_size: 1 } });
    expect((await api('GET', '/volumes/summary', undefined, token)).body).toEqual({ 'volume-summary': { total_count: 1, total_size: 1, metadata: { tier: ['gold'] } } });
  });

  test('metadata: POST merges, PUT replaces, PUT and DELETE one key; a missing key is 404 and changes nothing', async () => {
    const v = await availableVolume('meta');
    const base = `/volumes/${v.id}/metadata`;
    expect(await api('POST', base, { metadata: { a: '1', b: '2' } })).toMatchObject({ status: 200, body: { metadata: { a: '1', b: '2' } } });
    expect((await api('POST', base, { metadata: { b: '3', c: '4' } })).body).toEqual({ metadata: { a: '1', b: '3', c: '4' } });
    expect((await api('GET', base)).body).toEqual({ metadata: { a: '1', b: '3', c: '4' } });
    expect((await api('GET', `${base}/a`)).body).toEqual({ meta: { a: '1' } });
    expect((await api('PUT', `${base}/a`, { meta: { a: '9' } })).body).toEqual({ meta: { a: '9' } });
    expect((await api('PUT', `${base}/a`, { meta: { z: '9' } })).body.badRequest.message).toBe('Request body and URI mismatch');
    expect(await api('DELETE', `${base}/nope`)).toMatchObject({ status: 404, body: { itemNotFound: { message: `Volume ${v.id} has no metadata with key nope.` } } });
    expect((await api('DELETE', `${base}/c`)).status).toBe(200);
    expect((await api('GET', base)).body).toEqual({ metadata: { a: '9', b: '3' } });
    expect((await api('PUT', base, { metadata: { only: 'x' } })).body).toEqual({ metadata: { only: 'x' } });
    expect((await api('POST', base, { metadata: { bad: 1 } })).status).toBe(400);
    expect((await api('GET', base, undefined, 'other:other')).status).toBe(404);
    // The CLI's metadata set / unset use the same routes.
    expect((await cinder(DEMO, 'metadata', v.id, 'set', 'k=v')).code).toBe(0);
    expect((await cinder(DEMO, 'metadata', v.id, 'unset', 'only')).code).toBe(0);
    expect((await api('GET', base)).body).toEqual({ metadata: { k: 'v' } });
  });

  test('list sort (sort=key:dir and sort_key/sort_dir) and offset with limit, for volumes and snapshots', async () => {
    const [a, b] = [await availableVolume('sort-a', 'sorter:sorter'), await availableVolume('sort-b', 'sorter:sorter')];
    const names = async (query: string) => (await api('GET', `/volumes?${query}`, undefined, 'sorter:sorter')).body.volumes.map((x: any) => x.name);
    expect(await names('sort=name:asc')).toEqual(['sort-a', 'sort-b']);
    expect(await names('sort_key=name&sort_dir=desc')).toEqual(['sort-b', 'sort-a']);
    expect(await names('sort=name:asc&limit=1&offset=1')).toEqual(['sort-b']);
    expect((await api('GET', '/volumes?sort=name:sideways', undefined, 'sorter:sorter')).status).toBe(400);
    for (const v of [a, b]) await api('POST', '/snapshots', { snapshot: { volume_id: v.id, name: `snap-${v.name}` } }, 'sorter:sorter');
    const snaps = async (query: string) => (await api('GET', `/snapshots?${query}`, undefined, 'sorter:sorter')).body.snapshots.map((x: any) => x.name);
    expect(await snaps('sort=name:asc')).toEqual(['snap-sort-a', 'snap-sort-b']);
    expect(await snaps('sort_key=name&sort_dir=desc&offset=1')).toEqual(['snap-sort-a']);
    expect((await api('GET', '/snapshots?sort=color', undefined, 'sorter:sorter')).body.badRequest.message).toBe('Invalid input received: Invalid sort key color.');
  });
});

/**
 * The Tempest configuration of test/conformance (issue 15): what it tells Tempest about a stack,
 * and that nothing is left out silently — every flag turned off and every line of exclude.txt
 * carries its reason and is listed in docs/conformance.md.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { parse } from 'yaml';
import { accountsYaml, FLAGS_OFF, FLAGS_ON, tempestConf, type Account, type TempestInputs } from '../conformance/config.js';
import { causeOf, perTest, summarize } from '../conformance/tempest.js';

const admin: Account = { username: 'admin', password: "p'w#1", projectName: 'admin', userDomainName: 'Default', projectDomainName: 'Default', roles: ['admin'] };
const inputs = (credentials: TempestInputs['credentials']): TempestInputs => ({
  baseUrl: 'http://127.0.0.1:9999',
  workspace: '/tmp/ws',
  admin,
  credentials,
  volume: { min: '3.0', max: '3.70' },
  compute: { min: '2.1', max: '2.93' },
  backendNames: ['lvm-a', 'lvm-b'],
  storageProtocol: 'local',
  vendorName: 'Ferry',
  imageRef: 'img-1',
  imageRefAlt: 'img-2',
  flavorRef: '1',
  flavorRefAlt: '2',
  networkName: 'private',
  computeNodes: 4,
  networkExtensions: [],
  volumeExtensions: ['os-admin-actions', 'os-quota-sets'],
});

/** tempest.conf as {section: {key: value}} (oslo.config's INI). */
function sections(text: string): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  let current = '';
  for (const line of text.split('\n')) {
    const s = /^\[(.+)\]$/.exec(line);
    if (s) out[(current = s[1]!)] = {};
    else if (line.includes(' = ')) out[current]![line.slice(0, line.indexOf(' = '))] = line.slice(line.indexOf(' = ') + 3);
  }
  return out;
}

const docs = readFileSync('docs/conformance.md', 'utf8');
const excludeLines = readFileSync('test/conformance/exclude.txt', 'utf8')
  .split('\n')
  .filter((l) => l.trim() && !l.trim().startsWith('#'));

describe('tempest.conf', () => {
  test('points Tempest at the stack: identity v3, the services, the microversion ranges, no ssh', () => {
    const c = sections(tempestConf(inputs('dynamic')));
    expect(c.identity).toMatchObject({ uri_v3: 'http://127.0.0.1:9999/identity/v3', auth_version: 'v3' });
    expect(c.service_available).toMatchObject({ cinder: 'true', nova: 'true', glance: 'true', neutron: 'true', swift: 'false', heat: 'false' });
    expect(c.volume).toMatchObject({ min_microversion: '3.0', max_microversion: '3.70', backend_names: 'lvm-a,lvm-b', catalog_type: 'volumev3' });
    expect(c.compute).toMatchObject({ min_microversion: '2.1', max_microversion: '2.93', image_ref: 'img-1', flavor_ref_alt: '2', min_compute_nodes: '4' });
    expect(c.validation).toEqual({ run_validation: 'false' });
    // The extensions the stack lists, not 'all' (Tempest then looks for os-hosts).
    expect(c['volume-feature-enabled']).toMatchObject({ api_extensions: 'os-admin-actions,os-quota-sets', backup: 'false' });
  });

  test('dynamic credentials name the admin; pre-provisioned ones name accounts.yaml instead', () => {
    const dyn = sections(tempestConf(inputs('dynamic'))).auth!;
    expect(dyn).toMatchObject({ use_dynamic_credentials: 'true', admin_username: 'admin', create_isolated_networks: 'false' });
    expect(dyn.test_accounts_file).toBeUndefined();
    const pre = sections(tempestConf(inputs('accounts'))).auth!;
    expect(pre).toMatchObject({ use_dynamic_credentials: 'false', test_accounts_file: '/tmp/ws/etc/accounts.yaml' });
    expect(pre.admin_password).toBeUndefined();
  });

  test('every flag is written with its value', () => {
    const c = sections(tempestConf(inputs('dynamic')));
    for (const f of [...FLAGS_ON, ...FLAGS_OFF]) expect(c[f.section]?.[f.name], `${f.section}.${f.name}`).toBe(String(f.value));
  });
});

describe('what is not run is said, with why', () => {
  test('every flag turned off has a reason and is listed in docs/conformance.md', () => {
    for (const f of FLAGS_OFF) {
      expect(f.reason, f.name).toBeTruthy();
      expect(docs, `${f.section}.${f.name}`).toContain(`\`${f.name}\``);
    }
  });

  test('every exclude.txt line has a regex, a reason after #, and is listed in docs/conformance.md', () => {
    expect(excludeLines.length).toBeGreaterThan(0);
    for (const line of excludeLines) {
      const [regex, ...why] = line.split('#');
      expect(() => new RegExp(regex!.trim()), line).not.toThrow();
      expect(why.join('#').trim().length, line).toBeGreaterThan(10);
      // The docs name the module: the regex without anchors and escapes.
      const module = regex!.trim().replace(/^\^/, '').replace(/\\\./g, '.').replace(/\.$/, '');
      expect(docs, module).toContain(module);
    }
  });
});

test('accounts.yaml: quoted passwords survive, the admin account is typed admin', () => {
  const demo = { ...admin, username: 'demo', projectName: 'demo', roles: ['member'] };
  expect(parse(accountsYaml([admin, demo]))).toEqual([
    { username: 'admin', password: "p'w#1", project_name: 'admin', user_domain_name: 'Default', project_domain_name: 'Default', roles: ['admin'], types: ['admin'] },
    { username: 'demo', password: "p'w#1", project_name: 'demo', user_domain_name: 'Default', project_domain_name: 'Default', roles: ['member'] },
  ]);
});

test('failures group by cause with ids and numbers blanked; the pass rate counts what ran', () => {
  const tb = (path: string) => `Traceback...\ntempest.lib.exceptions.NotFound: Object not found\nDetails: {'code': 404, 'message': 'no route GET ${path}'}`;
  expect(causeOf(tb('/volumes/3f1c2a9e-1111-4222-8333-444455556666'))).toBe(causeOf(tb('/volumes/00000000-1111-4222-8333-444455556666')));
  const s = summarize(
    [
      { id: 'tempest.api.volume.test_a.T.test_1', status: 'success', reason: '' },
      { id: 'tempest.api.volume.test_a.T.test_2', status: 'fail', reason: tb('/x/1') },
      { id: 'tempest.api.volume.test_a.T.test_3', status: 'fail', reason: tb('/x/2') },
      { id: 'tempest.api.identity.v3.test_b.T.test_4', status: 'skip', reason: 'flag off' },
      { id: 'tempest.api.identity.v3.test_b.T.test_5', status: 'success', reason: '' },
    ],
    ['tempest.api.volume.test_a.T.test_1', 'tempest.api.volume.test_a.T.test_2', 'tempest.api.volume.test_a.T.test_3', 'tempest.api.volume.test_g.T.test_9', 'tempest.api.identity.v3.test_b.T.test_4', 'tempest.api.identity.v3.test_b.T.test_5'],
    ['tempest.api.volume.test_a.T.test_1', 'tempest.api.volume.test_a.T.test_2', 'tempest.api.volume.test_a.T.test_3', 'tempest.api.identity.v3.test_b.T.test_4', 'tempest.api.identity.v3.test_b.T.test_5'],
  );
  expect(s.groups.volume).toEqual({ selected: 4, excluded: 1, passed: 1, failed: 2, skipped: 0 });
  expect(s.groups.identity).toEqual({ selected: 2, excluded: 0, passed: 1, failed: 0, skipped: 1 });
  expect(s.total).toMatchObject({ selected: 6, excluded: 1, passed: 2, failed: 2, skipped: 1, passRate: 0.5 });
  expect(s.causes).toEqual([{ cause: causeOf(tb('/x/1')), count: 2, tests: ['tempest.api.volume.test_a.T.test_2', 'tempest.api.volume.test_a.T.test_3'] }]);
});

test('a failed setUpClass counts as each test of its class; a test with no result counts as failed', () => {
  const kept = ['tempest.api.volume.m.A.test_1', 'tempest.api.volume.m.A.test_2', 'tempest.api.volume.m.B.test_3', 'tempest.api.volume.m.C.test_4'];
  const tests = perTest(
    [
      { id: 'setUpClass (tempest.api.volume.m.A)', status: 'fail', reason: 'BadRequest: name too long' },
      { id: 'tempest.api.volume.m.B.test_3', status: 'success', reason: '' },
      { id: 'tearDownClass (tempest.api.volume.m.B)', status: 'fail', reason: 'cleanup 404' },
    ],
    kept,
  );
  expect(tests.map((t) => [t.id, t.status])).toEqual([
    ['tempest.api.volume.m.A.test_1', 'fail'],
    ['tempest.api.volume.m.A.test_2', 'fail'],
    ['tempest.api.volume.m.B.test_3', 'success'],
    ['tempest.api.volume.m.C.test_4', 'fail'],
  ]);
  expect(tests[0]!.reason).toContain('name too long');
  expect(tests[3]!.reason).toMatch(/^no result/);
});

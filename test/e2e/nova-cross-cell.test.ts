/**
 * The real nova CLI drives a cross-cell resize (issue 12, reference §1.4–§1.6, §1.10, §4) against
 * the local stack with `compute:servers:resize:cross_cell` allowed: resize to an m2 flavor (cell1
 * -> cell2), the listing while VERIFY_RESIZE, confirm, resize back to m1 and revert, the migration
 * and action lists, and `migrate --host` into the other cell. After every step the server keeps its
 * id, its IP and its volume (the bytes written before read back), exactly one copy is visible and
 * the audit is clean.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { findCopies } from '../../functions/servers/repo.js';
import { novaCli, parseListTable } from '../support/cli.js';
import { bootServer, cinderClient, createVolume, novaClient, putSmallRootFlavor, readThroughGuest, serverState, settled, volumeStatus, writeThroughGuest, type Cinder, type Nova } from '../support/nova.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and rediscovers the version. */
const SCENARIO_TIMEOUT_MS = 400_000;
const CELL1_HOSTS = ['cmp1', 'cmp2'];
const CELL2_HOSTS = ['cmp3', 'cmp4'];
/** A flavor without hw:generation (fits every cell), for `migrate --host` into cell2. */
const ANY_GENERATION_FLAVOR = '92';

let stack: TestLocalStack;
let endpoint: string;
let api: Nova;
let cinder: Cinder;
const savedPolicy = process.env.FERRY_POLICY;

beforeAll(async () => {
  // Before the stack starts: its functions read the policy in this process.
  process.env.FERRY_POLICY = JSON.stringify({ 'compute:servers:resize:cross_cell': 'admin_or_owner' });
  resetPolicyCache();
  stack = await useLocalStack();
  endpoint = `${stack.url}/compute/v2.1`;
  api = novaClient(stack);
  cinder = cinderClient(stack);
  await putSmallRootFlavor(ANY_GENERATION_FLAVOR, 'x1.anygen');
}, 180_000);
afterAll(async () => {
  await stack?.stop();
  if (savedPolicy === undefined) delete process.env.FERRY_POLICY;
  else process.env.FERRY_POLICY = savedPolicy;
  resetPolicyCache();
});

async function nova(...args: string[]): Promise<string> {
  const r = await novaCli(endpoint, args);
  if (r.code !== 0) throw new Error(`nova ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** What must not change across a move: the id (GET by id works), the fixed IP, the volume's bytes. */
interface Identity {
  server: string;
  ip: string;
  volume: string;
  digest: string;
}

const ipOf = (s: any): string => Object.values(s.addresses as Record<string, { addr: string }[]>).flat()[0]!.addr;

async function serverWithData(name: string, flavor: string): Promise<Identity> {
  const server = await bootServer(api, { name, flavor, host: 'cmp1' });
  const volume = await createVolume(cinder, 1, `${name}-data`);
  await nova('volume-attach', server, volume);
  const s = await settled(api, server);
  const digest = await writeThroughGuest(server, '/dev/vdb', name);
  return { server, ip: ipOf(s), volume, digest };
}

/** At most one visible copy, and a hidden copy only while the server waits in VERIFY_RESIZE. */
async function copiesAre(server: string, expected: { visibleCell: 'cell1' | 'cell2'; hidden: number }): Promise<void> {
  const copies = await findCopies(server);
  const visible = copies.filter((c) => !c.instance.hidden);
  expect(visible.map((c) => c.cell.name)).toEqual([expected.visibleCell]);
  expect(copies.filter((c) => c.instance.hidden)).toHaveLength(expected.hidden);
  // The mapped copy (first) is the visible one.
  expect(copies[0]!.instance.hidden).toBeFalsy();
}

/** The server after a settled step: same id, IP and bytes; every BDM's attachment live in Cinder. */
async function keepsIdentity(id: Identity, status: string, hosts: string[]): Promise<any> {
  const s = await settled(api, id.server, 120_000);
  expect(s.status, JSON.stringify(s.fault ?? s)).toBe(status);
  expect(s.id).toBe(id.server);
  expect(hosts).toContain(s['OS-EXT-SRV-ATTR:host']);
  expect(ipOf(s)).toBe(id.ip);
  expect((await volumeStatus(cinder, id.volume)).status).toBe('in-use');
  const { bdms } = await serverState(id.server);
  const live = (await volumeStatus(cinder, id.volume)).attachments.map((a) => a.attachment_id);
  expect(live).toContain(bdms.find((b) => b.volumeId === id.volume)!.attachmentId);
  expect(await readThroughGuest(id.server, '/dev/vdb')).toBe(id.digest);
  return s;
}

async function cleanAudit(): Promise<void> {
  const findings = (await runAudit()).findings;
  expect(findings, JSON.stringify(findings, null, 1)).toEqual([]);
}

async function migrationsOf(server: string): Promise<{ migration_type: string; status: string; source_compute: string; dest_compute: string; new_instance_type_id?: number }[]> {
  const res = await api('GET', `/os-migrations?instance_uuid=${server}`);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.migrations;
}

describe('cross-cell resize with the nova CLI', () => {
  test(
    'resize m2.small -> VERIFY_RESIZE listed once -> confirm; resize m1.small -> revert; lists',
    async () => {
      const id = await serverWithData('xcell-cli', '1');
      await copiesAre(id.server, { visibleCell: 'cell1', hidden: 0 });

      // resize cell1 -> cell2 (reference §1.4).
      await nova('resize', id.server, 'm2.small');
      const verify = await keepsIdentity(id, 'VERIFY_RESIZE', CELL2_HOSTS);
      expect(verify.flavor.original_name).toBe('m2.small');
      await copiesAre(id.server, { visibleCell: 'cell2', hidden: 1 });
      const listed = parseListTable(await nova('list')).filter((r) => r.ID === id.server);
      expect(listed).toHaveLength(1);
      expect(listed[0]!.Status).toBe('VERIFY_RESIZE');
      // §1.10: while VERIFY_RESIZE the volume has att_D (connected on dest) and att_S2 (reserved).
      const atts = (await cinder('GET', `/attachments?volume_id=${id.volume}`)).body.attachments as { id: string; status: string }[];
      expect(atts.map((a) => a.status).sort()).toEqual(['attached', 'reserved']);

      await nova('resize-confirm', id.server);
      const confirmed = await keepsIdentity(id, 'ACTIVE', CELL2_HOSTS);
      expect(confirmed.flavor.original_name).toBe('m2.small');
      await copiesAre(id.server, { visibleCell: 'cell2', hidden: 0 });
      expect((await volumeStatus(cinder, id.volume)).attachments).toHaveLength(1);
      expect((await migrationsOf(id.server))[0]).toMatchObject({ migration_type: 'resize', status: 'confirmed' });
      await cleanAudit();

      // resize back cell2 -> cell1, then revert (reference §1.6): back in cell2 with m2.small.
      const before = confirmed['OS-EXT-SRV-ATTR:host'] as string;
      await nova('resize', id.server, 'm1.small');
      const second = await keepsIdentity(id, 'VERIFY_RESIZE', CELL1_HOSTS);
      expect(second.flavor.original_name).toBe('m1.small');
      await copiesAre(id.server, { visibleCell: 'cell1', hidden: 1 });
      await nova('resize-revert', id.server);
      const reverted = await keepsIdentity(id, 'ACTIVE', [before]);
      expect(reverted.flavor.original_name).toBe('m2.small');
      await copiesAre(id.server, { visibleCell: 'cell2', hidden: 0 });
      expect((await volumeStatus(cinder, id.volume)).attachments).toHaveLength(1);
      await cleanAudit();

      // What novaclient shows of it all: two migrations (§1.5, §1.6) and the actions of §4.
      const migrations = parseListTable(await nova('migration-list', '--instance-uuid', id.server));
      expect(migrations.map((m) => m.Status).sort()).toEqual(['confirmed', 'reverted']);
      const actions = parseListTable(await nova('instance-action-list', id.server));
      expect(actions.map((a) => a.Action).sort()).toEqual(['attach_volume', 'confirmResize', 'create', 'resize', 'resize', 'revertResize'].sort());
      // Ferry fixes B2: the resize's conductor events are finished in the shown copy.
      const resize = (await api('GET', `/servers/${id.server}/os-instance-actions`)).body.instanceActions.find((a: any) => a.action === 'resize');
      const events = (await api('GET', `/servers/${id.server}/os-instance-actions/${resize.request_id}`)).body.instanceAction.events as { event: string; result: string | null }[];
      // Reference §4: both conductor events, finished (upstream leaves them open in the TGT copy).
      expect(events.filter((e) => e.event === 'conductor_migrate_server' || e.event === 'cold_migrate').map((e) => `${e.event}=${e.result}`).sort(), JSON.stringify(events)).toEqual(['cold_migrate=Success', 'conductor_migrate_server=Success']);
      const revert = (await api('GET', `/servers/${id.server}/os-instance-actions`)).body.instanceActions.find((a: any) => a.action === 'revertResize');
      const revertEvents = (await api('GET', `/servers/${id.server}/os-instance-actions/${revert.request_id}`)).body.instanceAction.events as { event: string; result: string | null }[];
      expect(revertEvents.map((e) => e.event).sort()).toEqual(['compute_finish_revert_snapshot_based_resize_at_source', 'compute_revert_snapshot_based_resize_at_dest', 'conductor_revert_snapshot_based_resize']);
      expect(revertEvents.every((e) => e.result === 'Success')).toBe(true);
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );

  test(
    'migrate --host cmp3 (2.56) moves a cell1 server into cell2; resize-confirm keeps it there',
    async () => {
      const id = await serverWithData('xcell-migrate', ANY_GENERATION_FLAVOR);
      const source = (await serverState(id.server)).instance.host!;
      expect(CELL1_HOSTS).toContain(source);
      const r = await novaCli(endpoint, ['migrate', '--host', 'cmp3', id.server], { version: '2.56' });
      expect(r.code, r.stderr).toBe(0);
      await keepsIdentity(id, 'VERIFY_RESIZE', ['cmp3']);
      await copiesAre(id.server, { visibleCell: 'cell2', hidden: 1 });
      expect((await migrationsOf(id.server))[0]).toMatchObject({ migration_type: 'migration', status: 'finished', source_compute: source, dest_compute: 'cmp3' });
      await nova('resize-confirm', id.server);
      await keepsIdentity(id, 'ACTIVE', ['cmp3']);
      await copiesAre(id.server, { visibleCell: 'cell2', hidden: 0 });
      expect((await migrationsOf(id.server))[0]).toMatchObject({ status: 'confirmed' });
      await cleanAudit();
    },
    SCENARIO_TIMEOUT_MS,
  );
});

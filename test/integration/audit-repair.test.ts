/**
 * `ferry audit --repair` on a whole local stack: every kind of orphan the audit knows is planted
 * the way a crash leaves it (an export no attachment uses, an attachment no BDM holds past the
 * grace, a connect intent of a call that died, a server operation whose machine never started)
 * beside findings only an operator may settle (a Ferry volume object with no record, a pool count
 * that disagrees) and two things a repair must not touch: a live migration held mid-way (its new
 * attachment has no BDM yet, only the operation's holds name it) and an attachment younger than
 * the grace. The repair removes exactly the repairable ones, reports the rest unchanged, leaves
 * the live migration alone (which then finishes), and the CLI says so with its exit code.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { main } from '../../bin/ferry.js';
import { attachmentKey, newConnectIntent } from '../../functions/attachments/model.js';
import { getAttachmentRecord, writeConnectIntent } from '../../functions/attachments/repo.js';
import { runAudit, type AuditFinding } from '../../functions/audit/audit.js';
import { repairFinding } from '../../functions/audit/repair.js';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { findServer, updateServer } from '../../functions/servers/repo.js';
import '../../functions/servers/flows/live-migration/api.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { getVolume, poolKey } from '../../functions/volumes/repo.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { action, assertCleanAudit, bootServer, cinderClient, createVolume, novaClient, serverState, settled, type Cinder, type Nova } from '../support/nova.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
let nova: Nova;
let cinder: Cinder;
beforeAll(async () => {
  // No timer run: the test decides when the reconciler runs.
  stack = await useLocalStack({ reconcile: { intervalSeconds: 0 } });
  nova = novaClient(stack);
  cinder = cinderClient(stack);
}, 300_000);
afterAll(async () => stack?.stop());
afterEach(() => clearFaults());

const T = () => tableName('volume');
/** Longer ago than the grace the CLI is given below, and than a connect intent lives; not yet "stuck" (an hour). */
const LONG_AGO = () => new Date(Date.now() - 600_000).toISOString();
const GRACE = '30';

function capture() {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (l: string) => out.push(l), err: (l: string) => err.push(l) }, out, err };
}

async function attachVolume(serverId: string, volumeId: string): Promise<void> {
  expect((await nova('POST', `/servers/${serverId}/os-volume_attachments`, { body: { volumeAttachment: { volumeId } } })).status).toBe(200);
  await settled(nova, serverId);
}

/** A Cinder attachment made by hand (POST /attachments, no connector): reserved. */
async function reserve(volumeId: string, instanceUuid: string | null): Promise<string> {
  const res = await cinder('POST', '/attachments', { attachment: { volume_uuid: volumeId, ...(instanceUuid ? { instance_uuid: instanceUuid } : {}) } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.attachment.id as string;
}

/** The attachment's item dated long ago (the item's own dates only: its volume's summary is the authority for updatedAt). */
const backdateItem = (attachmentId: string) =>
  db().send(new UpdateCommand({ TableName: T(), Key: attachmentKey(attachmentId), UpdateExpression: 'SET updatedAt = :t, createdAt = :t', ExpressionAttributeValues: { ':t': LONG_AGO() } }));

/** The attachment unchanged since long ago: its item and its volume's summary of it. */
async function backdate(attachmentId: string, volumeId: string): Promise<void> {
  await backdateItem(attachmentId);
  await db().send(new UpdateCommand({ TableName: T(), Key: volumeKey(volumeId), UpdateExpression: 'SET attachments.#a.updatedAt = :t', ExpressionAttributeNames: { '#a': attachmentId }, ExpressionAttributeValues: { ':t': LONG_AGO() } }));
}

async function driverOfVolume(volumeId: string) {
  const v = (await getVolume(volumeId))!;
  return { v, driver: await driverForHost(v.host!) };
}

const exportsOf = async (volumeId: string) => {
  const { v, driver } = await driverOfVolume(volumeId);
  return (await driver.listConnections()).filter((c) => c.backendName === v.backendName).map((c) => c.host).sort();
};

const attachmentOf = async (id: string) => (await cinder('GET', `/attachments/${id}`)).status;

describe('ferry audit --repair', () => {
  test('repairs exactly the repairable orphans, reports the rest unchanged, and leaves a live migration alone', async () => {
    // Prepare: three servers on cmp1, each with a data volume; spare volumes.
    const [s1, s2, s3] = [await bootServer(nova, { name: 'rp-1', host: 'cmp1' }), await bootServer(nova, { name: 'rp-2', host: 'cmp1' }), await bootServer(nova, { name: 'rp-3', host: 'cmp1' })];
    const [v1, v2, v3, v4, v5] = [await createVolume(cinder, 1, 'rp-v1'), await createVolume(cinder, 1, 'rp-v2'), await createVolume(cinder, 1, 'rp-v3'), await createVolume(cinder, 1, 'rp-v4'), await createVolume(cinder, 1, 'rp-v5')];
    await attachVolume(s1, v1);
    await attachVolume(s3, v5);
    await assertCleanAudit();

    // Plant, repairable: (1) an export of v1 to a host no attachment uses.
    const { v: vol1, driver: driver1 } = await driverOfVolume(v1);
    await driver1.initializeConnection(vol1.backendName, { host: 'cmp9' });
    // (2) an attachment of s1 that no BDM uses, unchanged for an hour (the leaked reservation).
    const leaked = await reserve(v2, s1);
    await backdate(leaked, v2);
    // (3) the connect intent of a PUT /attachments that died after initializeConnection.
    const connecting = await reserve(v4, null);
    const { v: vol4, driver: driver4 } = await driverOfVolume(v4);
    await driver4.initializeConnection(vol4.backendName, { host: 'cmp7' });
    expect(await writeConnectIntent((await getAttachmentRecord(connecting))!, newConnectIntent(connecting, { host: 'cmp7' }, LONG_AGO(), 'planted'))).toBeDefined();
    // (4) a stop of s2 whose machine never started (the API died between its write and StartExecution).
    const s2Cell = (await findServer(s2))!.cell;
    const planted = `req-${randomUUID()}`;
    await updateServer(s2Cell, s2, ({ instance }) => ({
      instance: { ...instance, taskState: 'powering-off', operation: { kind: 'stop', requestId: planted, executionName: `stop-${planted.slice(4)}`, params: {}, holds: {}, startedAt: LONG_AGO() } },
    }));
    // Plant, an operator's: a Ferry volume object with no record, a pool count off by 7 GiB.
    const strayObject = `volume-${randomUUID()}`;
    await driver1.createVolume({ backendName: strayObject, sizeGb: 1, pool: 'pool0' });
    const pool = vol1.host!;
    const shiftPool = (gb: number) => db().send(new UpdateCommand({ TableName: T(), Key: poolKey(pool), UpdateExpression: 'ADD allocatedGb :n', ExpressionAttributeValues: { ':n': gb } }));
    await shiftPool(7);
    // Must stay: an attachment of s1 younger than the grace...
    const young = await reserve(v3, s1);
    // ...and a live migration of s3 held in the driver's copy: two attachments of v5 exist, the
    // BDM names one (the destination's, as Nova's pre_live_migration switches it), only the
    // operation's holds name the other (the source's). Backdated, so only the holds protect it.
    injectFault({ kind: 'compute', backend: 'cmp1', method: 'liveMigration', mode: 'hang' });
    await action(nova, s3, { 'os-migrateLive': { host: null, block_migration: 'auto' } });
    const { held, destination } = await eventually(async (note) => {
      const { instance, bdms } = await serverState(s3);
      const holds = note(instance.operation?.holds);
      const named = new Set(bdms.map((b) => b.attachmentId));
      const onlyHeld = [...Object.values(holds?.newAttachments ?? {}), ...Object.values(holds?.oldAttachments ?? {})].filter((id) => !named.has(id));
      const running = (await nova('GET', `/servers/${s3}/migrations`)).body.migrations[0]?.status === 'running';
      const all = new Set([...Object.values(holds?.newAttachments ?? {}), ...Object.values(holds?.oldAttachments ?? {})]);
      return running && all.size === 2 && onlyHeld.length === 1 ? { held: onlyHeld[0]!, destination: Object.values(holds!.newAttachments!)[0]! } : undefined;
    }, 'the live migration of s3 to hold two attachments of v5 in the copy, one named by no BDM');
    const migrating = held;
    await backdate(migrating, v5);

    const before = (await runAudit()).findings;
    expect(before.map((f) => f.kind).sort()).toEqual(['attachment-without-bdm', 'attachment-without-bdm', 'capacity-mismatch', 'orphan-backend-volume', 'orphan-host-connection', 'pending-connect']);

    // A repair re-checks when it acts, not only when the audit ran: a finding for the migrating
    // attachment (as an audit that read s3 a moment before the migration began would report it) is left.
    const stale: AuditFinding = { kind: 'attachment-without-bdm', resource: `attachment ${migrating}`, detail: 'stale', ref: { attachmentId: migrating, volumeId: v5, instanceUuid: s3 } };
    const recheck = await repairFinding(stale, { before: new Date() });
    expect(recheck).toMatchObject({ outcome: 'left', saw: expect.stringContaining('is in operation live_migration') });

    // Act: the operator's command.
    const c = capture();
    const code = await main(['audit', '--repair', '--grace', GRACE], c.io);

    // Assess: exit 1, because findings remain; each repair printed with what it saw and did.
    const out = c.out.join('\n');
    expect(code, out + c.err.join('\n')).toBe(1);
    for (const [kind, resource] of [['orphan-host-connection', vol1.backendName], ['attachment-without-bdm', leaked], ['pending-connect', connecting], ['operation-without-execution', s2]]) {
      expect(out).toMatch(new RegExp(`repaired\\t${kind}\\t[^\\n]*${resource}\\n  saw: .+\\n  did: .+`));
    }
    expect(out).toMatch(new RegExp(`left\\tattachment-without-bdm\\tattachment ${young}\\n  saw: [^\\n]*within the grace period`));
    expect(out).toContain('3 finding(s):');

    // Exactly the operator's findings remain, as they were.
    const after = (await runAudit()).findings;
    const kept = (f: AuditFinding) => ['capacity-mismatch', 'orphan-backend-volume'].includes(f.kind) || f.resource === `attachment ${young}`;
    expect(after).toEqual(before.filter(kept));
    // The repairs' effects: exports, attachments, intents, the operation.
    expect(await exportsOf(v1)).toEqual(['cmp1']);
    expect(await exportsOf(v4)).toEqual([]);
    expect(await attachmentOf(leaked)).toBe(404);
    expect(await attachmentOf(young)).toBe(200);
    expect((await cinder('GET', `/attachments/${connecting}`)).body.attachment.status).toBe('reserved');
    const s2After = (await serverState(s2)).instance;
    expect(s2After).toMatchObject({ operation: null, taskState: null, vmState: 'active' });
    // The live migration was left alone: its held attachment is there, and it finishes when released.
    expect(await attachmentOf(migrating)).toBe(200);
    expect((await serverState(s3)).instance.operation?.kind).toBe('live_migration');
    clearFaults();
    expect((await settled(nova, s3))['OS-EXT-SRV-ATTR:host']).toBe('cmp2');
    expect((await serverState(s3)).bdms.find((b) => b.volumeId === v5)!.attachmentId).toBe(destination);

    // The operator settles the rest; then --repair finds nothing and exits 0.
    await driver1.deleteVolume(strayObject);
    await shiftPool(-7);
    expect((await cinder('DELETE', `/attachments/${young}`)).status).toBe(200);
    expect((await cinder('DELETE', `/attachments/${connecting}`)).status).toBe(200);
    const clean = capture();
    expect(await main(['audit', '--repair', '--grace', GRACE], clean.io)).toBe(0);
    expect(clean.out.join('\n')).toContain('0 repaired, 0 left alone or failed');
    expect(clean.out.join('\n')).toContain('audit clean');
    await assertCleanAudit();
  }, 400_000);

  test('the grace ages the state its volume holds: an attachment connected just now is left alone, though its item is dated long ago', async () => {
    const server = await bootServer(nova, { name: 'rp-grace', host: 'cmp1' });
    const volumeId = await createVolume(cinder, 1, 'rp-grace');
    const id = await reserve(volumeId, server);
    await backdate(id, volumeId);
    const connected = await cinder('PUT', `/attachments/${id}`, { attachment: { connector: { host: 'cmp1', initiator: 'iqn.grace', ip: '10.0.0.9', platform: 'x86_64', os_type: 'linux2', multipath: false } } });
    expect(connected.status, JSON.stringify(connected.body)).toBe(200);
    // The connect's state is its volume's summary: an item not written by it keeps the reserve's date.
    await backdateItem(id);
    const finding: AuditFinding = { kind: 'attachment-without-bdm', resource: `attachment ${id}`, detail: 'planted', ref: { attachmentId: id, volumeId, instanceUuid: server } };
    const record = await repairFinding(finding, { before: new Date(Date.now() - Number(GRACE) * 1000) });
    expect(record?.outcome).toBe('left');
    expect(record?.saw).toMatch(/within the grace period/);
    expect(await attachmentOf(id)).toBe(200);
    expect((await cinder('DELETE', `/attachments/${id}`)).status).toBe(200);
  }, 300_000);
});

/**
 * The real cinder CLI (python3-cinderclient 9.1.0) drives the local stack through the new
 * attachments API, and the states it shows match reference §3.3 at every step.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { cinderCli, parseListTable, parsePropertyTable } from '../support/cli.js';
import { volumeGone, volumeStatusBecomes } from '../support/volume-waits.js';
import { useLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and rediscovers versions: a scenario of ~25 calls needs minutes on a busy 2-core machine. */
const SCENARIO_TIMEOUT_MS = 300_000;

let stack: Awaited<ReturnType<typeof useLocalStack>>;
let endpoint: string;
const SERVER_A = '4a4a4a4a-0000-4000-8000-00000000000a';
const SERVER_B = '4b4b4b4b-0000-4000-8000-00000000000b';

const cinder = async (...args: string[]) => {
  const r = await cinderCli(endpoint, 'demo', 'demo', args);
  if (r.code !== 0) throw new Error(`cinder ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
};

/** Waits over HTTP for the volume's status, then shows the volume through the CLI. */
async function waitForVolume(id: string, status: string): Promise<Record<string, string>> {
  await volumeStatusBecomes(stack.url, 'demo:demo', id, status, 40_000);
  const v = parsePropertyTable(await cinder('show', id));
  expect(v.status, `volume ${id}`).toBe(status);
  return v;
}

/** Waits over HTTP until the volume is gone, then checks that `cinder show` says so. */
async function waitGone(id: string): Promise<void> {
  await volumeGone(stack.url, 'demo:demo', id);
  const r = await cinderCli(endpoint, 'demo', 'demo', ['show', id]);
  expect(r.code, r.stdout).not.toBe(0);
  expect(r.stderr + r.stdout).toMatch(/could not be found|No volume with a name or ID/);
}

beforeAll(async () => {
  stack = await useLocalStack();
  endpoint = `${stack.url}/volume/v3`;
});
afterAll(async () => stack?.stop());

describe('cinder CLI against the local stack', () => {
  test('create volume, attachment-create/update/complete/list/show/delete, delete volume', async () => {
    // Prepare: a volume, created through the volume-create state machine.
    const created = parsePropertyTable(await cinder('create', '--name', 'e2e-vol', '1'));
    expect(created.status).toBe('creating');
    const volumeId = created.id!;
    const available = await waitForVolume(volumeId, 'available');
    expect(available.size).toBe('1');

    // attachment-create without a connector: the attachment and the volume are reserved.
    const att = parsePropertyTable(await cinder('attachment-create', volumeId, SERVER_A));
    expect(att).toMatchObject({ status: 'reserved', instance: SERVER_A, volume_id: volumeId });
    const attachmentId = att.id!;
    expect(parsePropertyTable(await cinder('show', volumeId)).status).toBe('reserved');

    // attachment-update with a connector: attaching, with connection_info printed.
    const updated = await cinder('attachment-update', '--initiator', 'iqn.1993-08.org.debian:01:e2e', '--ip', '127.0.0.1', '--host', 'cmp1', '--mountpoint', '/dev/vdb', attachmentId);
    const updatedProps = parsePropertyTable(updated);
    expect(updatedProps.status).toBe('attaching');
    expect(updatedProps.attachment_id).toBe(attachmentId);
    expect(updatedProps.driver_volume_type).toBe('local');
    expect(updatedProps.access_mode).toBe('rw');
    expect(parsePropertyTable(await cinder('show', volumeId)).status).toBe('attaching');

    // attachment-complete: attached / in-use.
    await cinder('attachment-complete', attachmentId);
    expect(parsePropertyTable(await cinder('attachment-show', attachmentId)).status).toBe('attached');
    const inUse = parsePropertyTable(await cinder('show', volumeId));
    expect(inUse.status).toBe('in-use');
    expect(inUse.attached_servers).toContain(SERVER_A);

    // attachment-list shows it with the server id.
    const rows = parseListTable(await cinder('attachment-list', '--volume-id', volumeId));
    expect(rows).toEqual([{ ID: attachmentId, 'Volume ID': volumeId, Status: 'attached', 'Server ID': SERVER_A }]);

    // A volume that is attached cannot be deleted.
    const refused = await cinderCli(endpoint, 'demo', 'demo', ['delete', volumeId]);
    expect(refused.stdout + refused.stderr).toMatch(/Invalid volume|must be available/);

    // attachment-delete: the volume is available again.
    await cinder('attachment-delete', attachmentId);
    expect(parsePropertyTable(await cinder('show', volumeId)).status).toBe('available');
    expect(parseListTable(await cinder('attachment-list', '--volume-id', volumeId))).toEqual([]);

    // attachment-create --connect True: the connector goes with the create, so it is attaching at once.
    const connected = parsePropertyTable(
      await cinder('attachment-create', '--connect', 'True', '--initiator', 'iqn.1993-08.org.debian:01:e2e', '--ip', '127.0.0.1', '--host', 'cmp2', '--mode', 'ro', volumeId, SERVER_B),
    );
    expect(connected.status).toBe('attaching');
    expect(connected.attach_mode).toBe('ro');
    expect(connected.access_mode).toBe('ro');
    await cinder('attachment-complete', connected.id!);
    expect(parsePropertyTable(await cinder('show', volumeId)).status).toBe('in-use');
    await cinder('attachment-delete', connected.id!);

    // delete the volume through the volume-delete state machine.
    await cinder('delete', volumeId);
    await waitGone(volumeId);

    // Assess: nothing left behind anywhere.
    const audit = await runAudit();
    expect(audit.findings).toEqual([]);
  }, SCENARIO_TIMEOUT_MS);

  test('a second server on a non-multiattach volume is refused with 400, and the CLI says why', async () => {
    const volumeId = parsePropertyTable(await cinder('create', '--name', 'e2e-single', '1')).id!;
    await waitForVolume(volumeId, 'available');
    const first = parsePropertyTable(await cinder('attachment-create', volumeId, SERVER_A));
    const second = await cinderCli(endpoint, 'demo', 'demo', ['attachment-create', volumeId, SERVER_B]);
    expect(second.code).not.toBe(0);
    expect(second.stderr).toMatch(/HTTP 400/);
    expect(second.stderr).toMatch(/status must be available or downloading to reserve/);
    expect(parseListTable(await cinder('attachment-list', '--volume-id', volumeId)).map((r) => r.ID)).toEqual([first.id]);
    await cinder('attachment-delete', first.id!);
    await cinder('delete', volumeId);
    await waitGone(volumeId);
    expect((await runAudit()).findings).toEqual([]);
  }, SCENARIO_TIMEOUT_MS);
});

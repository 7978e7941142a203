/**
 * The real cinder CLI (python3-cinderclient 9.1.0) drives replication v2.1 on the local stack as
 * an admin through noauth: failover-host (without and with --backend_id), failover-host back with
 * `default`, freeze-host and thaw-host, with `service-list --withreplication` and `show` checked
 * after each step (reference §2.3/§2.4, §4.2). The waits go over HTTP (test/support/volume-waits.ts);
 * the state waited for is then shown through the CLI.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { cinderCli, parseListTable, parsePropertyTable } from '../support/cli.js';
import { serviceReplicationBecomes, volumeGone, volumeStatusBecomes } from '../support/volume-waits.js';
import { useLocalStack } from '../support/stack.js';

const HOST = 'ferry@lvm-r';
let stack: Awaited<ReturnType<typeof useLocalStack>>;
let endpoint: string;

const cinder = async (...args: string[]) => {
  const r = await cinderCli(endpoint, 'admin', 'admin', args);
  if (r.code !== 0) throw new Error(`cinder ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
};

async function serviceRow(): Promise<Record<string, string>> {
  const rows = parseListTable(await cinder('service-list', '--withreplication', '--binary', 'cinder-volume'));
  const row = rows.find((r) => r.Host === HOST);
  if (!row) throw new Error(`${HOST} is not in service-list`);
  return row;
}

/** Waits over HTTP for the replication status, then shows the service row through the CLI. */
async function waitForService(replicationStatus: string): Promise<Record<string, string>> {
  await serviceReplicationBecomes(stack.url, HOST, replicationStatus);
  const row = await serviceRow();
  expect(row['Replication Status'], `${HOST} in service-list`).toBe(replicationStatus);
  return row;
}

/** Waits over HTTP for the volume's status, then shows the volume through the CLI. */
async function waitForVolume(id: string, status: string): Promise<Record<string, string>> {
  await volumeStatusBecomes(stack.url, 'admin:admin', id, status);
  const v = parsePropertyTable(await cinder('show', id));
  expect(v.status, `volume ${id}`).toBe(status);
  return v;
}

beforeAll(async () => {
  stack = await useLocalStack();
  endpoint = `${stack.url}/volume/v3`;
}, 60_000);
afterAll(async () => stack?.stop());

describe('cinder CLI: replication', () => {
  test('service-list --withreplication shows the replicated backend enabled, not frozen', async () => {
    const rows = parseListTable(await cinder('service-list', '--withreplication'));
    expect(Object.keys(rows[0]!)).toEqual(expect.arrayContaining(['Binary', 'Host', 'Zone', 'Status', 'State', 'Replication Status', 'Active Backend ID', 'Frozen', 'Disabled Reason']));
    expect(rows.find((r) => r.Host === HOST)).toMatchObject({ Binary: 'cinder-volume', Status: 'enabled', State: 'up', 'Replication Status': 'enabled', 'Active Backend ID': '-', Frozen: 'False' });
    expect(rows.find((r) => r.Host === 'ferry@lvm-a')).toMatchObject({ 'Replication Status': 'disabled' });
  });

  test('failover-host, failover-host --backend_id default, --backend_id site-c, and back', async () => {
    // Prepare: a replicated volume and a plain one, both on the replicated backend.
    await cinder('type-create', 'lvm-r-plain');
    await cinder('type-key', 'lvm-r-plain', 'set', 'volume_backend_name=lvm-r');
    const replicated = parsePropertyTable(await cinder('create', '--volume-type', 'replicated', '--name', 'e2e-rep', '1')).id!;
    const plain = parsePropertyTable(await cinder('create', '--volume-type', 'lvm-r-plain', '--name', 'e2e-plain', '1')).id!;
    expect((await waitForVolume(replicated, 'available')).replication_status).toBe('enabled');
    expect((await waitForVolume(plain, 'available')).replication_status).toBe('disabled');
    expect(parsePropertyTable(await cinder('show', replicated))['os-vol-host-attr:host']).toBe(`${HOST}#pool0`);

    // Act: fail over without --backend_id (the driver picks its first target).
    await cinder('failover-host', HOST);
    const failedOver = await waitForService('failed-over');
    // Assess
    expect(failedOver).toMatchObject({ Status: 'disabled', 'Active Backend ID': 'site-b', Frozen: 'False', 'Disabled Reason': 'failed-over' });
    expect(parsePropertyTable(await cinder('show', replicated))).toMatchObject({ status: 'available', replication_status: 'failed-over' });
    expect(parsePropertyTable(await cinder('show', plain))).toMatchObject({ status: 'error', replication_status: 'not-capable' });

    // Act: a second failover while failed over names an unknown target: refused by the driver, back to failed-over.
    await cinder('failover-host', HOST, '--backend_id', 'nowhere');
    await new Promise((r) => setTimeout(r, 200));
    expect((await waitForService('failed-over'))['Active Backend ID']).toBe('site-b');

    // Act: fail back.
    await cinder('failover-host', HOST, '--backend_id', 'default');
    const back = await waitForService('enabled');
    // Assess
    expect(back).toMatchObject({ Status: 'enabled', 'Active Backend ID': '-', Frozen: 'False' });
    expect(parsePropertyTable(await cinder('show', replicated))).toMatchObject({ status: 'available', replication_status: 'enabled' });
    expect(parsePropertyTable(await cinder('show', plain))).toMatchObject({ status: 'error', replication_status: 'not-capable' });

    // Act: fail over to the second target by name, then back.
    await cinder('failover-host', HOST, '--backend_id', 'site-c');
    expect((await waitForService('failed-over'))['Active Backend ID']).toBe('site-c');
    expect(parsePropertyTable(await cinder('show', replicated)).replication_status).toBe('failed-over');
    await cinder('failover-host', HOST, '--backend_id', 'default');
    await waitForService('enabled');
    expect(parsePropertyTable(await cinder('show', replicated)).replication_status).toBe('enabled');

    // A non-admin is refused (policy volume:failover_host is admin_api).
    const denied = await cinderCli(endpoint, 'demo', 'demo', ['failover-host', HOST]);
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toMatch(/Policy doesn't allow volume:failover_host to be performed\. \(HTTP 403\)/);
    // An unknown host: upstream's 400 text.
    const unknown = await cinderCli(endpoint, 'admin', 'admin', ['failover-host', 'nohost@x']);
    expect(unknown.stderr).toMatch(/No service found with host=nohost@x \(HTTP 400\)/);

    await cinder('delete', replicated, plain);
    expect((await runAudit()).findings).toEqual([]);
  }, 180_000);

  test('freeze-host and thaw-host; a frozen backend refuses delete with the upstream message', async () => {
    // Prepare
    const id = parsePropertyTable(await cinder('create', '--volume-type', 'replicated', '1')).id!;
    await waitForVolume(id, 'available');
    // Act
    await cinder('freeze-host', HOST);
    // Assess
    expect(await serviceRow()).toMatchObject({ Frozen: 'True', Status: 'disabled', 'Disabled Reason': 'frozen', 'Replication Status': 'enabled' });
    const refused = await cinderCli(endpoint, 'admin', 'admin', ['delete', id]);
    expect(refused.stdout + refused.stderr).toMatch(/Modification operations are not allowed on frozen storage backends/);
    const again = await cinderCli(endpoint, 'admin', 'admin', ['freeze-host', HOST]);
    expect(again.stderr).toMatch(/No service could be changed: frozen in \['ferry@lvm-r'\] must be False to failover\. \(HTTP 400\)/);
    // Act
    await cinder('thaw-host', HOST);
    // Assess
    expect(await serviceRow()).toMatchObject({ Frozen: 'False', Status: 'enabled', 'Replication Status': 'enabled' });
    await cinder('delete', id);
    await volumeGone(stack.url, 'admin:admin', id, 20_000);
    expect((await cinderCli(endpoint, 'admin', 'admin', ['show', id])).code, `cinder show ${id} after the delete`).not.toBe(0);
    expect((await runAudit()).findings).toEqual([]);
  }, 60_000);
});

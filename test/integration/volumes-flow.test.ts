/**
 * The whole volume flow through the embedded local stack over HTTP: POST /volumes runs the
 * volume-create machine (schedule, create on the backend, available, optional attach), DELETE runs
 * volume-delete; failures injected into the driver end in error / error_deleting with nothing
 * leaked; manage keeps the legacy backend name; a console start of volume-create records and
 * creates the same way.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { SFNClient, StartExecutionCommand, DescribeExecutionCommand } from '@aws-sdk/client-sfn';
import { clearFaultCalls, clearFaults, faultCalls, injectFault } from '../../functions/core/faults.js';
import { driverForHost } from '../../functions/volumes/backends.js';
import { stateMachineArn } from '../../functions/core/executions.js';
import { getVolume } from '../../functions/volumes/repo.js';
import { volumeIdForExecution } from '../../functions/volumes/steps.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
});
afterAll(async () => stack?.stop());
// Every scenario ends with DynamoDB and the backends agreeing.
afterEach(async () => {
  clearFaults();
  expect((await runAudit()).findings).toEqual([]);
});

async function api(method: string, path: string, body?: unknown, token = 'demo:demo') {
  const res = await fetch(`${stack.url}/volume/v3${path}`, {
    method,
    headers: { 'X-Auth-Token': token, 'OpenStack-API-Version': 'volume 3.70', Accept: 'application/json', ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function statusBecomes(id: string, wanted: string[], token = 'demo:demo'): Promise<Record<string, any>> {
  return eventually(async () => {
    const res = await api('GET', `/volumes/${id}`, undefined, token);
    return wanted.includes(res.body?.volume?.status) ? res.body.volume : undefined;
  }, `volume ${id} to become ${wanted.join('|')}`);
}

describe('create and delete through the state machines', () => {
  test('POST /volumes: 202 creating, then available with a backend object; DELETE removes both', async () => {
    // Act
    const created = await api('POST', '/volumes', { volume: { size: 2, name: 'flow' } });
    // Assess
    expect(created.status).toBe(202);
    expect(created.body.volume.status).toBe('creating');
    const id = created.body.volume.id;
    const available = await statusBecomes(id, ['available', 'error']);
    expect(available.status).toBe('available');
    const record = (await getVolume(id))!;
    const driver = await driverForHost(record.host!);
    expect(await driver.getVolume(`volume-${id}`)).toEqual({ backendName: `volume-${id}`, sizeGb: 2 });

    const deleted = await api('DELETE', `/volumes/${id}`);
    expect(deleted.status).toBe(202);
    await eventually(async () => ((await api('GET', `/volumes/${id}`)).status === 404 ? true : undefined), 'volume gone');
    expect(await driver.getVolume(`volume-${id}`)).toBeUndefined();
  });

  test('create with server_id reserves an attachment for that instance once available (seed 003)', async () => {
    const server = '44444444-4444-4444-4444-444444444444';
    const created = await api('POST', '/volumes', { volume: { size: 1, server_id: server } });
    const id = created.body.volume.id;
    const volume = await statusBecomes(id, ['reserved', 'error']);
    expect(volume.status).toBe('reserved');
    const attachments = await api('GET', `/attachments?volume_id=${id}`);
    expect(attachments.body.attachments).toEqual([expect.objectContaining({ volume_id: id, instance: server, status: 'reserved' })]);
  });

  test('createVolume failing on every backend: error, capacity released, no backend object', async () => {
    // Prepare: unlimited, so the Task's retries fail too.
    injectFault({ kind: 'volume', method: 'createVolume', mode: 'fail-after' });
    // Act
    const created = await api('POST', '/volumes', { volume: { size: 3 } });
    // Assess
    const failed = await statusBecomes(created.body.volume.id, ['error', 'available']);
    expect(failed.status).toBe('error');
    const record = (await getVolume(failed.id))!;
    expect(record.capacity ?? null).toBeNull();
    expect(await (await driverForHost(record.host!)).getVolume(record.backendName)).toBeUndefined();
  });

  test('a backend still creating (BackendNotReady) is waited for by the machine, not in a function: created once, available', async () => {
    // The backend accepts the create but answers "not finished" twice: the BackendNotReady retrier
    // of CreateOnBackend runs the step again after its wait (infra/asl/policy.ts BACKEND_WAIT).
    injectFault({ kind: 'volume', method: 'createVolume', mode: 'not-ready-after', times: 2 });
    clearFaultCalls();
    const created = await api('POST', '/volumes', { volume: { size: 1 } });
    const volume = await statusBecomes(created.body.volume.id, ['available', 'error']);
    expect(volume.status).toBe('available');
    const creates = faultCalls().filter((c) => c.method === 'createVolume');
    expect(creates.map((c) => c.outcome)).toEqual(['injected-not-ready', 'injected-not-ready', 'ok']);
    const record = (await getVolume(volume.id))!;
    expect(await (await driverForHost(record.host!)).getVolume(record.backendName)).toEqual({ backendName: record.backendName, sizeGb: 1 });
  });

  test('a volume larger than any pool ends in error with the scheduler reason', async () => {
    const created = await api('POST', '/volumes', { volume: { size: 100000 } });
    const failed = await statusBecomes(created.body.volume.id, ['error', 'available']);
    expect(failed.status).toBe('error');
    expect((await getVolume(failed.id))!.errorReason).toMatch(/^No valid backend was found/);
  });

  test('deleteVolume failing: error_deleting, backend object intact', async () => {
    // Prepare
    const created = await api('POST', '/volumes', { volume: { size: 1 } });
    const id = created.body.volume.id;
    await statusBecomes(id, ['available']);
    injectFault({ kind: 'volume', method: 'deleteVolume', mode: 'fail' });
    // Act
    expect((await api('DELETE', `/volumes/${id}`)).status).toBe(202);
    // Assess
    await statusBecomes(id, ['error_deleting']);
    const record = (await getVolume(id))!;
    expect(await (await driverForHost(record.host!)).getVolume(record.backendName)).toEqual({ backendName: record.backendName, sizeGb: 1 });
    expect(record.capacity).toEqual({ pool: record.host, gb: 1 });
  });
});

describe('manage', () => {
  test('manage keeps the legacy name for the volume life; a second manage of the object is refused', async () => {
    // Prepare: an object Ferry does not know, made on the backend directly.
    const driver = await driverForHost('ferry@lvm-b');
    await driver.createVolume({ backendName: 'legacy-vol-7', sizeGb: 3, pool: 'pool0' });
    const body = { volume: { host: 'ferry@lvm-b#pool0', ref: { 'source-name': 'legacy-vol-7' }, name: 'legacy' } };
    // Act
    const managed = await api('POST', '/manageable_volumes', body, 'admin:admin');
    const again = await api('POST', '/manageable_volumes', body, 'admin:admin');
    // Assess
    expect(managed.status).toBe(202);
    expect(managed.body.volume.status).toBe('managing');
    expect(again.status).toBe(400);
    const volume = await statusBecomes(managed.body.volume.id, ['available', 'error_managing'], 'admin:admin');
    expect(volume).toMatchObject({ status: 'available', size: 3, name: 'legacy' });
    expect((await getVolume(volume.id))!.backendName).toBe('legacy-vol-7');
    expect(await driver.getVolume('legacy-vol-7')).toEqual({ backendName: 'legacy-vol-7', sizeGb: 3 });
  });
});

describe('console start', () => {
  test('volume-create started with a create body records and creates the volume', async () => {
    // Prepare
    const sfn = new SFNClient({ region: 'us-east-1', endpoint: `${stack.url}/_aws/stepfunctions`, credentials: { accessKeyId: 'x', secretAccessKey: 'x' } });
    const name = 'console-create-1';
    // Act
    const started = await sfn.send(new StartExecutionCommand({ stateMachineArn: stateMachineArn('volume-create'), name, input: JSON.stringify({ volume: { size: 1, name: 'from-console' }, projectId: 'demo', userId: 'demo' }) }));
    // Assess
    const finished = await eventually(async () => {
      const d = await sfn.send(new DescribeExecutionCommand({ executionArn: started.executionArn }));
      return d.status === 'RUNNING' ? undefined : d;
    }, 'execution to finish');
    expect([finished.status, finished.error, finished.cause]).toEqual(['SUCCEEDED', undefined, undefined]);
    const volume = await statusBecomes(volumeIdForExecution(name), ['available', 'error']);
    expect(volume).toMatchObject({ status: 'available', name: 'from-console', 'os-vol-tenant-attr:tenant_id': 'demo' });
  });
});

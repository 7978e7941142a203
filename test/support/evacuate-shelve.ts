/**
 * The local stack and helpers of the evacuate / shelve tests
 * (test/integration/servers-evacuate-shelve.test.ts): the stack with a small-root flavor and a
 * clean audit after each test, a compute host forced down or disabled through os-services, what a
 * host's driver holds (guests, connected volumes), the last evacuation of a server, Cinder's live attachments
 * and the check that every volume BDM holds the one live attachment, attach through Nova, and the
 * events of an instance action.
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { clearFaults } from '../../functions/core/faults.js';
import { cinderCalls } from '../../functions/servers/cinder.js';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { setHostDown } from '../../functions/drivers/compute/local.js';
import { nodeOfHost } from '../../functions/servers/engine.js';
import { listMigrations } from '../../functions/servers/migrations.js';
import type { Migration } from '../../functions/servers/model.js';
import { assertCleanAudit, cinderClient, novaClient, putSmallRootFlavor, serverState, settled, type Cinder, type Nova } from './nova.js';
import { useLocalStack, type TestLocalStack } from './stack.js';

/** A flavor with root_gb 0 (the root disk is the image's size), so shelve snapshots and evacuation copies stay small. */
export const SMALL_ROOT_FLAVOR = '90';

/**
 * Starts the local stack for the calling test file (with the small-root flavor; after each test the
 * faults cleared and the audit checked clean) and returns its Nova and Cinder clients (usable once
 * beforeAll has run) with the helpers over them.
 */
export function useEvacuateShelveStack() {
  let stack: TestLocalStack | undefined;
  let clients: { nova: Nova; cinder: Cinder } | undefined;
  beforeAll(async () => {
    stack = await useLocalStack();
    clients = { nova: novaClient(stack), cinder: cinderClient(stack) };
    await putSmallRootFlavor(SMALL_ROOT_FLAVOR, 'm1.tinyroot');
  }, 120_000);
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    clearFaults();
    await assertCleanAudit();
  }, 120_000);
  const nova: Nova = (...args) => clients!.nova(...args);
  const cinder: Cinder = (...args) => clients!.cinder(...args);

  /** The attachments API calls (reads left out), in order. */
  const callNames = () => cinderCalls().map((c) => c.call).filter((c) => c !== 'get' && c !== 'attachment_get');

  const driverOf = async (host: string) => computeDriverFor((await nodeOfHost(host)).node.config);
  const nodeUuidOf = async (host: string) => (await nodeOfHost(host)).node.uuid;
  const guestsOn = async (host: string) => (await (await driverOf(host)).listGuests()).map((g) => g.uuid);
  const connectedVolumesOn = async (host: string) => (await (await driverOf(host)).listConnections()).map((c) => c.volumeId);

  async function serviceId(host: string): Promise<string> {
    const res = await nova('GET', `/os-services?host=${host}&binary=nova-compute`, { version: '2.53' });
    return res.body.services[0].id as string;
  }

  /** A compute host down: forced down through os-services (2.53) and its driver host down (the guest unreachable). */
  async function setComputeDown(host: string, down: boolean): Promise<void> {
    const res = await nova('PUT', `/os-services/${await serviceId(host)}`, { version: '2.53', body: { forced_down: down } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await setHostDown((await nodeOfHost(host)).node.config, down);
  }

  async function setServiceDisabled(host: string, disabled: boolean): Promise<void> {
    const res = await nova('PUT', `/os-services/${await serviceId(host)}`, { version: '2.53', body: { status: disabled ? 'disabled' : 'enabled' } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  }

  async function lastEvacuation(id: string): Promise<Migration> {
    const mine = (await listMigrations()).map((m) => m.migration).filter((m) => m.instanceUuid === id && m.migrationType === 'evacuation');
    return mine.sort((a, b) => a.id - b.id).at(-1)!;
  }

  /** Cinder's live attachments of a volume (any status), as the attachments API lists them. */
  async function liveAttachments(volumeId: string): Promise<{ id: string; status: string; connector: boolean }[]> {
    const res = await cinder('GET', `/attachments/detail?volume_id=${volumeId}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.attachments.map((a: { id: string; status: string; connection_info: unknown }) => ({ id: a.id, status: a.status, connector: !!a.connection_info && Object.keys(a.connection_info as object).length > 0 }));
  }

  /** Every volume BDM's attachment is the one live attachment Cinder has for that volume. */
  async function expectBdmsMatchCinder(id: string): Promise<void> {
    const { bdms } = await serverState(id);
    for (const b of bdms.filter((x) => x.volumeId)) {
      expect((await liveAttachments(b.volumeId!)).map((a) => a.id), `volume ${b.volumeId}`).toEqual([b.attachmentId]);
    }
  }

  async function volumeOf(id: string) {
    return (await cinder('GET', `/volumes/${id}`)).body.volume as { status: string; attachments: { attachment_id: string; host_name: string | null }[] };
  }

  async function attach(id: string, volumeId: string): Promise<string | null> {
    const res = await nova('POST', `/servers/${id}/os-volume_attachments`, { body: { volumeAttachment: { volumeId } } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await settled(nova, id);
    return res.body.volumeAttachment.device as string | null;
  }

  async function eventsOf(id: string, actionName: string): Promise<{ event: string; result: string | null }[]> {
    const actions = (await nova('GET', `/servers/${id}/os-instance-actions`)).body.instanceActions as { action: string; request_id: string }[];
    const a = actions.find((x) => x.action === actionName)!;
    return (await nova('GET', `/servers/${id}/os-instance-actions/${a.request_id}`)).body.instanceAction.events;
  }

  return { nova, cinder, callNames, driverOf, nodeUuidOf, guestsOn, connectedVolumesOn, serviceId, setComputeDown, setServiceDisabled, lastEvacuation, liveAttachments, expectBdmsMatchCinder, volumeOf, attach, eventsOf };
}

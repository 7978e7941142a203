/**
 * Crash scenarios of the synchronous API actions that touch a backend (no execution resumes them:
 * after a restart the stack's reconciler at start must finish or undo what they began):
 *   PUT /attachments/{id} with a connector  functions/attachments/connections.ts (initializeConnection)
 *   POST /attachments with a connector      functions/attachments/service.ts createAttachment -> connections.ts
 *   DELETE /attachments/{id}                functions/attachments/connections.ts (terminateConnection)
 *   POST /snapshots, DELETE /snapshots/{id} functions/snapshots/routes.ts (createSnapshot, deleteSnapshot)
 *   POST /volumes/{id}/action os-extend     functions/volumes/actions.ts (extendVolume)
 *   POST /shares/{id}/action allow_access   functions/shares/access.ts:42 (updateAccess), deny_access likewise
 *   POST /shares/{id}/action extend, shrink functions/shares/resize.ts runResize (extendShare, shrinkShare)
 */
import { randomUUID } from 'node:crypto';
import { getAttachmentRecord } from '../../../functions/attachments/repo.js';
import { getShare } from '../../../functions/shares/repo.js';
import { getSnapshot } from '../../../functions/snapshots/repo.js';
import { getVolume } from '../../../functions/volumes/repo.js';
import { manilaClient } from '../../support/manila.js';
import { cinderClient, createVolume } from '../../support/nova.js';
import type { TestLocalStack } from '../../support/stack.js';
import type { CrashScenario } from '../../support/crash.js';

const connector = (host: string) => ({ initiator: `iqn.2004-10.org:${host}`, ip: '10.0.0.5', platform: 'x86_64', host, os_type: 'linux2', multipath: false, mountpoint: '/dev/vdb' });

export function syncActionScenarios(stack: TestLocalStack): CrashScenario<any>[] {
  const cinder = cinderClient(stack);
  const m = manilaClient(() => stack.url);
  const ok = (what: string, expected: number[]) => (res: { status: number; body: any }) => {
    if (!expected.includes(res.status)) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`);
    return res;
  };

  interface AttachmentFixture {
    volume: string;
    instance: string;
    attachment?: string;
  }
  async function reserved(): Promise<AttachmentFixture> {
    const volume = await createVolume(cinder, 1, 'crash-att');
    const instance = randomUUID();
    const res = ok('POST /attachments', [200])(await cinder('POST', '/attachments', { attachment: { volume_uuid: volume, instance_uuid: instance, connector: null } }));
    return { volume, instance, attachment: res.body.attachment.id };
  }
  const attachmentStatus = async (f: AttachmentFixture) => {
    const listed = (await cinder('GET', `/attachments/detail?volume_id=${f.volume}`)).body.attachments as { id: string; status: string }[];
    f.attachment ??= listed[0]?.id;
    return listed[0]?.status;
  };

  const update: CrashScenario<AttachmentFixture> = {
    name: 'PUT /attachments/{id} (connector)',
    setup: reserved,
    start: async (f) => ok('PUT /attachments', [200])(await cinder('PUT', `/attachments/${f.attachment}`, { attachment: { connector: connector('cmp1') } })),
    async outcome(f) {
      const status = await attachmentStatus(f);
      return status === 'attaching' ? 'finished' : status === 'reserved' ? 'rolled-back' : undefined;
    },
  };

  const createWithConnector: CrashScenario<AttachmentFixture> = {
    name: 'POST /attachments (connector)',
    setup: async () => ({ volume: await createVolume(cinder, 1, 'crash-att'), instance: randomUUID() }),
    start: async (f) => ok('POST /attachments', [200])(await cinder('POST', '/attachments', { attachment: { volume_uuid: f.volume, instance_uuid: f.instance, connector: connector('cmp1') } })),
    async outcome(f) {
      const status = await attachmentStatus(f);
      if (status === undefined) return (await getVolume(f.volume))?.status === 'available' ? 'rolled-back' : undefined;
      return status === 'attaching' ? 'finished' : status === 'reserved' ? 'rolled-back' : undefined;
    },
  };

  const remove: CrashScenario<AttachmentFixture> = {
    name: 'DELETE /attachments/{id}',
    async setup() {
      const f = await reserved();
      ok('PUT /attachments', [200])(await cinder('PUT', `/attachments/${f.attachment}`, { attachment: { connector: connector('cmp1') } }));
      return f;
    },
    start: async (f) => ok('DELETE /attachments', [200])(await cinder('DELETE', `/attachments/${f.attachment}`)),
    async outcome(f) {
      const a = await getAttachmentRecord(f.attachment!);
      if (!a || a.deleted) return (await getVolume(f.volume))?.status === 'available' ? 'finished' : undefined;
      return a.attachStatus === 'attaching' ? 'rolled-back' : undefined;
    },
  };

  const snapshotCreate: CrashScenario<{ volume: string; name: string; id?: string }> = {
    name: 'POST /snapshots',
    setup: async () => ({ volume: await createVolume(cinder, 1, 'crash-snap'), name: `crash-${randomUUID().slice(0, 8)}` }),
    async start(f) {
      const res = ok('POST /snapshots', [202])(await cinder('POST', '/snapshots', { snapshot: { volume_id: f.volume, name: f.name } }));
      f.id = res.body.snapshot.id;
    },
    async outcome(f) {
      const listed = (await cinder('GET', `/snapshots?volume_id=${f.volume}`)).body.snapshots as { id: string }[];
      const id = f.id ?? listed[0]?.id;
      if (!id) return 'rolled-back';
      const s = await getSnapshot(id);
      return s?.status === 'available' ? 'finished' : !s || s.status === 'error' ? 'rolled-back' : undefined;
    },
  };

  const snapshotDelete: CrashScenario<{ volume: string; id: string }> = {
    name: 'DELETE /snapshots/{id}',
    async setup() {
      const volume = await createVolume(cinder, 1, 'crash-snap');
      const res = ok('POST /snapshots', [202])(await cinder('POST', '/snapshots', { snapshot: { volume_id: volume } }));
      return { volume, id: res.body.snapshot.id };
    },
    start: async (f) => ok('DELETE /snapshots', [202])(await cinder('DELETE', `/snapshots/${f.id}`)),
    async outcome(f) {
      const s = await getSnapshot(f.id);
      return !s ? 'finished' : s.status === 'available' || s.status === 'error_deleting' ? 'rolled-back' : undefined;
    },
  };

  const extend: CrashScenario<{ volume: string }> = {
    name: 'POST /volumes/{id}/action os-extend',
    setup: async () => ({ volume: await createVolume(cinder, 1, 'crash-ext') }),
    start: async (f) => ok('os-extend', [202])(await cinder('POST', `/volumes/${f.volume}/action`, { 'os-extend': { new_size: 2 } })),
    async outcome(f) {
      const v = await getVolume(f.volume);
      if (v?.status !== 'available') return v?.status === 'error_extending' ? 'rolled-back' : undefined;
      return v.size === 2 ? 'finished' : 'rolled-back';
    },
  };

  const allowAccess: CrashScenario<{ id: string }> = {
    name: 'POST /shares/{id}/action allow_access',
    setup: async () => ({ id: (await m.availableShare('nfs-a', { name: `crash-${randomUUID().slice(0, 8)}` })).id }),
    start: async (f) => ok('allow_access', [200])(await m.action(f.id, { allow_access: { access_type: 'ip', access_to: '10.7.0.0/24', access_level: 'rw' } })),
    async outcome(f) {
      const rules = await rulesOf(f.id);
      if (!rules.length) return 'rolled-back';
      return rules[0]!.state === 'active' ? 'finished' : rules[0]!.state === 'error' ? 'rolled-back' : undefined;
    },
  };

  const rulesOf = async (id: string) => (await m.api('GET', `/share-access-rules?share_id=${id}`, undefined, { version: '2.45' })).body.access_list as { id: string; state: string }[];
  const denyAccess: CrashScenario<{ id: string; rule: string }> = {
    name: 'POST /shares/{id}/action deny_access',
    async setup() {
      const { id } = await m.availableShare('nfs-a', { name: `crash-${randomUUID().slice(0, 8)}` });
      const res = ok('allow_access', [200])(await m.action(id, { allow_access: { access_type: 'ip', access_to: '10.7.0.0/24', access_level: 'rw' } }));
      return { id, rule: res.body.access.id };
    },
    start: async (f) => ok('deny_access', [202])(await m.action(f.id, { deny_access: { access_id: f.rule } })),
    async outcome(f) {
      const rule = (await rulesOf(f.id)).find((r) => r.id === f.rule);
      return !rule ? 'finished' : rule.state === 'active' ? 'rolled-back' : undefined;
    },
  };

  /** A resize ends at one size or the other: finished at `to`, rolled back at `from` (an error state counts as rolled back). */
  const resized = (from: number, to: number) => async (f: { id: string }) => {
    const s = await getShare(f.id);
    if (!s || s.resize) return undefined;
    if (s.status === 'available') return s.size === to ? 'finished' : s.size === from ? 'rolled-back' : undefined;
    return s.status === 'extending_error' || s.status === 'shrinking_error' ? 'rolled-back' : undefined;
  };
  const shareExtend: CrashScenario<{ id: string }> = {
    name: 'POST /shares/{id}/action extend',
    setup: async () => ({ id: (await m.availableShare('nfs-a', { name: `crash-${randomUUID().slice(0, 8)}` })).id }),
    start: async (f) => ok('extend', [202])(await m.action(f.id, { extend: { new_size: 2 } })),
    outcome: resized(1, 2),
  };
  const shareShrink: CrashScenario<{ id: string }> = {
    name: 'POST /shares/{id}/action shrink',
    setup: async () => ({ id: (await m.availableShare('nfs-a', { name: `crash-${randomUUID().slice(0, 8)}`, size: 2 })).id }),
    start: async (f) => ok('shrink', [202])(await m.action(f.id, { shrink: { new_size: 1 } })),
    outcome: resized(2, 1),
  };

  return [update, createWithConnector, remove, snapshotCreate, snapshotDelete, extend, allowAccess, denyAccess, shareExtend, shareShrink];
}

export const SYNC_ACTION_SCENARIOS = [
  'PUT /attachments/{id} (connector)',
  'POST /attachments (connector)',
  'DELETE /attachments/{id}',
  'POST /snapshots',
  'DELETE /snapshots/{id}',
  'POST /volumes/{id}/action os-extend',
  'POST /shares/{id}/action allow_access',
  'POST /shares/{id}/action deny_access',
  'POST /shares/{id}/action extend',
  'POST /shares/{id}/action shrink',
];

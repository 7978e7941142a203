/**
 * Crash scenarios of the volume machines (volume-create, volume-delete, volume-failover), driven
 * through the Cinder API of a local stack, fixtures as in test/integration/volumes-flow and
 * replication-failover.
 */
import { getSnapshot } from '../../../functions/snapshots/repo.js';
import { getVolume } from '../../../functions/volumes/repo.js';
import { cinderClient, createVolume } from '../../support/nova.js';
import { eventually } from '../../support/poll.js';
import { replicatedService } from './failover-service.js';
import type { TestLocalStack } from '../../support/stack.js';
import type { CrashOutcome, CrashScenario } from '../../support/crash.js';

const REPLICATED_HOST = 'ferry@lvm-r';

export function volumeScenarios(stack: TestLocalStack): CrashScenario<any>[] {
  const cinder = cinderClient(stack);

  const volumeCreate: CrashScenario<{ name: string; id?: string }> = {
    name: 'volume-create',
    setup: async () => ({ name: `crash-${Math.random().toString(36).slice(2, 10)}` }),
    async start(f) {
      const res = await cinder('POST', '/volumes', { volume: { size: 1, name: f.name } });
      if (res.status !== 202) throw new Error(`POST /volumes: ${res.status} ${JSON.stringify(res.body)}`);
      f.id = res.body.volume.id;
    },
    async outcome(f) {
      // The request may have crashed before it answered: find the volume by its name.
      const id = f.id ?? (await cinder('GET', `/volumes?name=${f.name}`)).body.volumes?.[0]?.id;
      if (!id) return 'rolled-back';
      f.id = id;
      const v = await getVolume(id);
      if (!v) return 'rolled-back';
      return v.status === 'available' ? 'finished' : v.status === 'error' ? 'rolled-back' : undefined;
    },
  };

  /**
   * A volume from a snapshot, or a clone: finished = available with the source's hold given back;
   * rolled back = error (or never recorded) with the hold given back. A hold left behind never settles.
   */
  const fromSource = (kind: 'snapshot' | 'volume'): CrashScenario<{ name: string; sourceId: string; volumeId: string; id?: string }> => ({
    name: kind === 'snapshot' ? 'volume-create-from-snapshot' : 'volume-clone',
    async setup() {
      const volumeId = await createVolume(cinder, 1, 'crash-src');
      let sourceId = volumeId;
      if (kind === 'snapshot') {
        const snap = await cinder('POST', '/snapshots', { snapshot: { volume_id: volumeId } });
        sourceId = snap.body.snapshot.id;
        await eventually(async () => ((await getSnapshot(sourceId))?.status === 'available' ? true : undefined), `snapshot ${sourceId}`);
      }
      return { name: `crash-${Math.random().toString(36).slice(2, 10)}`, sourceId, volumeId };
    },
    async start(f) {
      const res = await cinder('POST', '/volumes', { volume: { name: f.name, ...(kind === 'snapshot' ? { snapshot_id: f.sourceId } : { source_volid: f.sourceId }) } });
      if (res.status !== 202) throw new Error(`POST /volumes: ${res.status} ${JSON.stringify(res.body)}`);
      f.id = res.body.volume.id;
    },
    async outcome(f) {
      const source = kind === 'snapshot' ? await getSnapshot(f.sourceId) : await getVolume(f.sourceId);
      if ((source?.dependentCreates ?? 0) !== 0) return undefined;
      const id = f.id ?? (await cinder('GET', `/volumes?name=${f.name}`)).body.volumes?.[0]?.id;
      if (!id) return 'rolled-back';
      f.id = id;
      const v = await getVolume(id);
      if (!v) return 'rolled-back';
      return v.status === 'available' ? 'finished' : v.status === 'error' ? 'rolled-back' : undefined;
    },
  });

  const volumeDelete: CrashScenario<{ id: string }> = {
    name: 'volume-delete',
    setup: async () => ({ id: await createVolume(cinder, 1, 'crash-del') }),
    async start(f) {
      const res = await cinder('DELETE', `/volumes/${f.id}`);
      if (res.status !== 202) throw new Error(`DELETE /volumes: ${res.status} ${JSON.stringify(res.body)}`);
    },
    async outcome(f) {
      const v = await getVolume(f.id);
      if (!v) return 'finished';
      return v.status === 'error_deleting' ? 'rolled-back' : undefined;
    },
  };

  const { service, failoverTo, homeFirst } = replicatedService(cinder, REPLICATED_HOST);

  const volumeFailover: CrashScenario<{ ids: string[] }> = {
    name: 'volume-failover',
    timeoutMs: 180_000,
    async setup() {
      // Home first: each point starts from the primary with two replicated volumes.
      await homeFirst();
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) {
        const res = await cinder('POST', '/volumes', { volume: { size: 1, volume_type: 'replicated' } });
        ids.push(res.body.volume.id);
      }
      for (const id of ids) await eventually(async () => ((await getVolume(id))?.status === 'available' ? true : undefined), `replicated volume ${id}`);
      return { ids };
    },
    async start() {
      const res = await failoverTo('site-b');
      if (res.status !== 202) throw new Error(`failover: ${res.status} ${JSON.stringify(res.body)}`);
    },
    async outcome(f): Promise<CrashOutcome | undefined> {
      const s = await service();
      if (s.replication_status === 'failed-over' && s.active_backend_id === 'site-b') {
        for (const id of f.ids) if ((await getVolume(id))?.replicationStatus !== 'failed-over') return undefined;
        return 'finished';
      }
      if (s.replication_status === 'enabled' && !s.active_backend_id) return undefined;
      return s.replication_status === 'failover-error' ? 'rolled-back' : undefined;
    },
  };

  return [volumeCreate, fromSource('snapshot'), fromSource('volume'), volumeDelete, volumeFailover];
}

/**
 * Crash scenarios of the share machines (share-create, share-delete, share-migration-start,
 * -complete, -cancel), through the Manila API of a local stack, fixtures as in
 * test/integration/shares-flow and share-migration-flows: driver-assisted nfs-a -> nfs-b, and
 * host-assisted (the copy worker) nfs-a -> nfs-c.
 */
import { getShare } from '../../../functions/shares/repo.js';
import { fillShare, manilaClient, migrationStartBody } from '../../support/manila.js';
import type { TestLocalStack } from '../../support/stack.js';
import type { CrashOutcome, CrashScenario } from '../../support/crash.js';

const uniqueName = (prefix: string) => `${prefix}-${Math.random().toString(36).slice(2, 10)}`;

export function shareScenarios(stack: TestLocalStack): CrashScenario<any>[] {
  const m = manilaClient(() => stack.url);

  const taskState = async (id: string) => (await getShare(id))?.taskState ?? null;
  const ended = (finished: string, id: string) => async (): Promise<CrashOutcome | undefined> => {
    const t = await taskState(id);
    if (t === finished) return 'finished';
    return t === 'migration_error' || t === 'migration_cancelled' ? 'rolled-back' : undefined;
  };

  /** An available share on nfs-a with a little data and one rule. */
  async function sourceShare(): Promise<{ id: string; path: string }> {
    const s = await m.availableShare('nfs-a', { name: uniqueName('crash') });
    await fillShare(s.path, { bigBytes: 256 * 1024, files: 5 });
    const rule = await m.action(s.id, { allow_access: { access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' } });
    if (rule.status !== 200) throw new Error(`allow_access: ${rule.status}`);
    return s;
  }

  async function migrate(id: string, dest: 'nfs-b' | 'nfs-c'): Promise<void> {
    const type = await m.typePinnedTo(dest);
    const flags = dest === 'nfs-c' ? { force_host_assisted_migration: true } : { writable: true, preserve_metadata: true };
    const res = await m.action(id, migrationStartBody(`ferry@${dest}#pool0`, flags, { new_share_type_id: type }));
    if (res.status !== 202) throw new Error(`migration_start: ${res.status} ${JSON.stringify(res.body)}`);
  }
  const phase1Done = (dest: 'nfs-b' | 'nfs-c') => (dest === 'nfs-b' ? 'migration_driver_phase1_done' : 'data_copying_completed');
  /** A share whose migration to `dest` finished phase 1: what complete and cancel start from. */
  async function afterPhase1(dest: 'nfs-b' | 'nfs-c'): Promise<{ id: string }> {
    const { id } = await sourceShare();
    await migrate(id, dest);
    await m.taskStateBecomes(id, [phase1Done(dest)]);
    return { id };
  }

  const shareCreate: CrashScenario<{ name: string; id?: string }> = {
    name: 'share-create',
    setup: async () => {
      await m.typePinnedTo('nfs-a');
      return { name: uniqueName('crash') };
    },
    async start(f) {
      const res = await m.api('POST', '/shares', { share: { share_proto: 'NFS', size: 1, name: f.name, share_type: 'on-nfs-a' } });
      if (res.status !== 202) throw new Error(`POST /shares: ${res.status} ${JSON.stringify(res.body)}`);
      f.id = res.body.share.id;
    },
    async outcome(f) {
      const id = f.id ?? (await m.api('GET', `/shares?name=${f.name}`)).body.shares?.[0]?.id;
      if (!id) return 'rolled-back';
      f.id = id;
      const s = await getShare(id);
      if (!s) return 'rolled-back';
      return s.status === 'available' ? 'finished' : s.status === 'error' ? 'rolled-back' : undefined;
    },
  };

  const shareDelete: CrashScenario<{ id: string }> = {
    name: 'share-delete',
    setup: async () => ({ id: (await m.availableShare('nfs-a', { name: uniqueName('crash-del') })).id }),
    async start(f) {
      const res = await m.api('DELETE', `/shares/${f.id}`);
      if (res.status !== 202) throw new Error(`DELETE /shares: ${res.status} ${JSON.stringify(res.body)}`);
    },
    async outcome(f) {
      const s = await getShare(f.id);
      if (!s) return 'finished';
      return s.status === 'error_deleting' ? 'rolled-back' : undefined;
    },
  };

  const migrationStart = (dest: 'nfs-b' | 'nfs-c'): CrashScenario<{ id: string }> => ({
    name: `share-migration-start (${dest === 'nfs-b' ? 'driver-assisted' : 'host-assisted'})`,
    timeoutMs: 120_000,
    setup: async () => ({ id: (await sourceShare()).id }),
    start: (f) => migrate(f.id, dest),
    outcome: (f) => ended(phase1Done(dest), f.id)(),
  });

  const migrationComplete = (dest: 'nfs-b' | 'nfs-c'): CrashScenario<{ id: string }> => ({
    name: `share-migration-complete (${dest === 'nfs-b' ? 'driver-assisted' : 'host-assisted'})`,
    timeoutMs: 120_000,
    setup: () => afterPhase1(dest),
    async start(f) {
      const res = await m.action(f.id, { migration_complete: null });
      if (res.status !== 202) throw new Error(`migration_complete: ${res.status} ${JSON.stringify(res.body)}`);
    },
    outcome: (f) => ended('migration_success', f.id)(),
  });

  const migrationCancel = (dest: 'nfs-b' | 'nfs-c'): CrashScenario<{ id: string }> => ({
    name: `share-migration-cancel (${dest === 'nfs-b' ? 'driver-assisted' : 'host-assisted'})`,
    timeoutMs: 120_000,
    setup: () => afterPhase1(dest),
    async start(f) {
      const res = await m.action(f.id, { migration_cancel: null });
      if (res.status !== 202) throw new Error(`migration_cancel: ${res.status} ${JSON.stringify(res.body)}`);
    },
    async outcome(f) {
      const t = await taskState(f.id);
      if (t === 'migration_cancelled') return 'finished';
      return t === 'migration_error' ? 'rolled-back' : undefined;
    },
  });

  return [
    shareCreate,
    shareDelete,
    migrationStart('nfs-b'),
    migrationStart('nfs-c'),
    migrationComplete('nfs-b'),
    migrationComplete('nfs-c'),
    migrationCancel('nfs-b'),
    migrationCancel('nfs-c'),
  ];
}

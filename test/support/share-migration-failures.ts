/**
 * The local stack and helpers of the share migration failure tests
 * (test/integration/share-migration-failures.test.ts): the stack with fast migration settings and,
 * after each test, faults cleared and a clean audit; the source and destination pools and the
 * share's own rules; a scenario (a share with data and its own rules, what the destination held
 * before); starting its migration; a fault whose every use is counted; the exact cleanup check on
 * the source; waiting for a task_state or a copy under way; the copy workers of a process from /proc.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { getCopyOperation } from '../../functions/copy/progress.js';
import { clearFaultCalls, clearFaults, faultCalls, injectFault, listFaults, type FaultSpec } from '../../functions/core/faults.js';
import { copyOperationIdOf } from '../../functions/migration/host-copy.js';
import { allocatedOnSharePool, getShare } from '../../functions/shares/repo.js';
import { fillShare, manilaClient, migrationStartBody, shareDigest, useFastMigrationEnv } from './manila.js';
import { eventually } from './poll.js';
import { useLocalStack, type TestLocalStack } from './stack.js';

export const SRC = 'ferry@nfs-a#pool0';
export const DRIVER_DEST = 'ferry@nfs-b#pool0';
export const HOST_DEST = 'ferry@nfs-c#pool0';
/** The share's own rules, one of each level: after any cleanup the source holds exactly these. */
export const OWN_RULES = ['10.8.0.1:ro', '10.9.0.0/24:rw'];

export interface Scenario {
  id: string;
  path: string;
  before: Record<string, string>;
  destPool: string;
  destAllocatedBefore: number;
  destEntriesBefore: string[];
  migrationId?: string;
}

/**
 * Starts the local stack for the calling test file (fast migration settings; after each test the
 * faults and copy settings cleared and the audit clean) and returns its Manila client, the stack
 * (usable once beforeAll has run) and the helpers over them.
 */
export function useShareMigrationFailureStack() {
  let stack: TestLocalStack;
  const m = manilaClient(() => stack.url);
  let restoreEnv: (() => void) | undefined;

  beforeAll(async () => {
    restoreEnv = useFastMigrationEnv(['FERRY_COPY_BYTES_PER_SECOND', 'FERRY_COPY_THREADS']);
    stack = await useLocalStack();
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    restoreEnv?.();
  });
  afterEach(async () => {
    clearFaults();
    clearFaultCalls();
    delete process.env.FERRY_COPY_BYTES_PER_SECOND;
    delete process.env.FERRY_COPY_THREADS;
    expect((await runAudit()).findings).toEqual([]);
  });

  const backendOf = (pool: string) => pool.split('#')[0]!;
  const backendDir = (pool: string) => join(stack.dataDir, 'shares', backendOf(pool).split('@')[1]!);
  /** What a backend holds: share directories and the files beside them (rules, migration state). */
  const backendEntries = (pool: string) => (existsSync(backendDir(pool)) ? readdirSync(backendDir(pool)).sort() : []);

  const rulesOf = (file: string): string[] => {
    if (!existsSync(file)) return [];
    return (JSON.parse(readFileSync(file, 'utf8')) as { accessTo: string; accessLevel: string }[]).map((r) => `${r.accessTo}:${r.accessLevel}`).sort();
  };
  const modeOf = (path: string) => statSync(path).mode & 0o777;

  /** An available share on nfs-a with data and the two OWN_RULES; what the destination pool holds before the migration. */
  async function scenario(destPool: string, fill: Parameters<typeof fillShare>[1] = {}): Promise<Scenario> {
    const { id, path } = await m.availableShare('nfs-a');
    await fillShare(path, fill);
    for (const [to, level] of [['10.9.0.0/24', 'rw'], ['10.8.0.1', 'ro']]) {
      const r = await m.action(id, { allow_access: { access_type: 'ip', access_to: to, access_level: level } });
      expect(r.status).toBe(200);
    }
    expect(rulesOf(path + '.access.json')).toEqual(OWN_RULES);
    return { id, path, before: shareDigest(path), destPool, destAllocatedBefore: await allocatedOnSharePool(destPool), destEntriesBefore: backendEntries(destPool) };
  }

  async function start(sc: Scenario, flags: Parameters<typeof migrationStartBody>[1] = {}): Promise<string> {
    // The share's type pins it to nfs-a; the new type pins it to the destination backend.
    const newType = await m.typePinnedTo(backendOf(sc.destPool).split('@')[1]!);
    const r = await m.action(sc.id, migrationStartBody(sc.destPool, flags, { new_share_type_id: newType }));
    expect(r.status).toBe(202);
    sc.migrationId = (await getShare(sc.id))!.migration!.id;
    return sc.migrationId;
  }

  /** A fault whose every use the test checks: `times` calls made, all refused, the fault used up. */
  function fault(spec: FaultSpec) {
    const id = injectFault(spec);
    return {
      id,
      refused: () => faultCalls().filter((c) => c.faultId === id && c.outcome === 'injected-fail').length,
      usedUp: () => !listFaults().some((f) => f.id === id),
    };
  }

  /** Everything the migration made is gone and the share is as it was, on its source. */
  async function expectCleanOnSource(sc: Scenario, taskState: string): Promise<void> {
    const s = await m.share(sc.id);
    expect(s).toMatchObject({ status: 'available', host: SRC, task_state: taskState });
    const record = (await getShare(sc.id))!;
    expect(record.migration).toBeNull();
    const instances = (await m.api('GET', `/shares/${sc.id}/instances`)).body.share_instances;
    expect(instances).toHaveLength(1);
    expect(instances[0]).toMatchObject({ host: SRC, status: 'available' });
    // No destination share, no .migration.json, no rules file left on the destination backend.
    expect(backendEntries(sc.destPool)).toEqual(sc.destEntriesBefore);
    // The source: exactly the share's own rules at their own levels (no data node, no read-only cast), writable.
    expect(rulesOf(sc.path + '.access.json')).toEqual(OWN_RULES);
    expect(modeOf(sc.path)).toBe(0o755);
    expect(shareDigest(sc.path)).toEqual(sc.before);
    expect(await allocatedOnSharePool(sc.destPool)).toBe(sc.destAllocatedBefore);
    expect(await getCopyOperation(copyOperationIdOf(sc.migrationId!))).toBeUndefined();
    expect((await runAudit()).findings).toEqual([]);
  }

  /** Waits for task_state `wanted` from a state taskStateBecomes would take for the end (a migration_error being cleaned up). */
  async function taskStateTurns(id: string, wanted: string) {
    return eventually(async () => {
      const s = await m.share(id);
      return s.task_state === wanted ? s : undefined;
    }, `share ${id} task_state ${wanted}`, 60_000);
  }

  /** Copy workers that are children of this process (the in-process stack's copy tasks), from /proc. */
  function childrenOf(ppid: number, cmdlineHas: string): number[] {
    const out: number[] = [];
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        if (Number(fields[1]) !== ppid || fields[0] === 'Z') continue;
        if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ').includes(cmdlineHas)) out.push(Number(entry));
      } catch {
        // gone meanwhile
      }
    }
    return out;
  }

  function processGone(pid: number): boolean {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
    } catch {
      return true;
    }
  }

  /** Copy record of a running copy with at least one file finished and bytes still to copy. */
  async function copyUnderWay(operationId: string) {
    return eventually(async () => {
      const r = await getCopyOperation(operationId);
      return r && r.status === 'running' && (r.filesDone ?? 0) > 0 && (r.bytesDone ?? 0) < (r.bytesTotal ?? 0) ? r : undefined;
    }, 'the copy under way with some files done', 60_000);
  }

  return { m, stack: () => stack, backendOf, backendEntries, rulesOf, modeOf, scenario, start, fault, expectCleanOnSource, taskStateTurns, childrenOf, processGone, copyUnderWay };
}

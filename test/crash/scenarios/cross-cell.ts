/**
 * Crash scenarios of cross-cell resize (issue 12): resize an m1 server of cell1 to m2.small (only
 * cell2 hosts fit it), confirm it, revert it; one attached volume, so the attachment calls of
 * reference §1.10 are crash points (kind cinder). Besides the harness's three promises, each point
 * checks the copies (reference §1.9): exactly one visible copy, in the cell the outcome says, and
 * a hidden copy only while the server waits in VERIFY_RESIZE (in the other cell) — never two
 * visible copies, never an orphan hidden one. The check runs in `cleanup`, which the harness calls
 * after its own checks and whose throw fails the point, before the server is removed.
 *
 * The policy `compute:servers:resize:cross_cell` must be allowed before the stack starts:
 * CROSS_CELL_POLICY_ENV is what the test files put into process.env.
 */
import { scanAllAttachments } from '../../../functions/attachments/repo.js';
import { findCopies, loadPartition } from '../../../functions/servers/repo.js';
import { bootServer, cinderClient, createVolume, novaClient, settled } from '../../support/nova.js';
import { eventually } from '../../support/poll.js';
import type { TestLocalStack } from '../../support/stack.js';
import type { CrashOutcome, CrashPoint, CrashScenario } from '../../support/crash.js';

export const CROSS_CELL_POLICY_ENV = { FERRY_POLICY: JSON.stringify({ 'compute:servers:resize:cross_cell': 'admin_or_owner' }) };

export const CROSS_CELL_SCENARIOS = ['server-cross-cell-resize', 'server-cross-cell-confirm', 'server-cross-cell-revert'];

/** m1.small (cell1 hardware) and m2.small (cell2 hardware), functions/compute/seed.ts. */
const M1_SMALL = '1';
const M2_SMALL = '3';
const CELL2_HOSTS = ['cmp3', 'cmp4'];

/**
 * The subset's points (test/crash/subset.test.ts): between each pair of the cross-cell sub-tasks of
 * the resize (before PrepResizeAtDest: only the hidden TGT copy made; before PrepResizeAtSource:
 * the TGT copy and att_D exist, the source guest still runs; before FinishResizeAtDest: the source
 * guest destroyed, its disks kept, the snapshot uploaded), and right after the revert's mapping
 * flip (SRC shown again, the dest guest still there).
 */
export const CROSS_CELL_SUBSET: [scenario: string, point: CrashPoint][] = [
  ['server-cross-cell-resize', { kind: 'step-before', backend: 'server-resize', method: 'PrepResizeAtDest', occurrence: 1, mode: 'crash' }],
  ['server-cross-cell-resize', { kind: 'step-before', backend: 'server-resize', method: 'PrepResizeAtSource', occurrence: 1, mode: 'crash' }],
  ['server-cross-cell-resize', { kind: 'step-before', backend: 'server-resize', method: 'FinishResizeAtDest', occurrence: 1, mode: 'crash' }],
  ['server-cross-cell-revert', { kind: 'step', backend: 'server-cross-cell-revert', method: 'FlipToSource', occurrence: 1, mode: 'crash' }],
];

interface Fixture {
  id: string;
  host: string;
  volume: string;
}

interface Rest {
  status: string;
  host: string | null;
  migration?: string;
}

export function crossCellScenarios(stack: TestLocalStack): CrashScenario<Fixture>[] {
  const nova = novaClient(stack);
  const cinder = cinderClient(stack);
  const name = () => `xcrash-${Math.random().toString(36).slice(2, 10)}`;

  const call = async (method: string, path: string, body: unknown, expected: number[]) => {
    const res = await nova(method, path, { body });
    if (!expected.includes(res.status)) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
    return res;
  };
  const act = (id: string, body: unknown, expected = [202]) => call('POST', `/servers/${id}/action`, body, expected);

  /** The server once nothing runs on it (no operation on any copy, task None); undefined meanwhile. */
  async function rest(id: string): Promise<Rest | undefined> {
    if ((await findCopies(id)).some((c) => c.instance.operation)) return undefined;
    const res = await nova('GET', `/servers/${id}`);
    if (res.status === 404) return { status: 'DELETED', host: null };
    const s = res.body.server;
    if (s['OS-EXT-STS:task_state'] !== null) return undefined;
    const migration = (await nova('GET', `/os-migrations?instance_uuid=${id}`)).body.migrations?.[0]?.status as string | undefined;
    return { status: s.status, host: s['OS-EXT-SRV-ATTR:host'], ...(migration ? { migration } : {}) };
  }

  /** Reference §1.9 at rest: one visible copy on `s.host`'s cell; a hidden one only in VERIFY_RESIZE, in the other cell. */
  async function checkCopies(id: string): Promise<void> {
    const s = await rest(id);
    if (!s) throw new Error(`server ${id}: still busy when the copies are checked`);
    if (s.status === 'DELETED') return;
    const copies = await findCopies(id);
    const visible = copies.filter((c) => !c.instance.hidden);
    const hidden = copies.filter((c) => c.instance.hidden);
    const shownCell = CELL2_HOSTS.includes(s.host ?? '') ? 'cell2' : 'cell1';
    if (visible.length !== 1) throw new Error(`server ${id}: ${visible.length} visible copies (${visible.map((c) => c.cell.name).join(', ')})`);
    if (visible[0]!.cell.name !== shownCell) throw new Error(`server ${id}: the visible copy is in ${visible[0]!.cell.name}, its host ${s.host} in ${shownCell}`);
    if (copies[0]!.instance.hidden) throw new Error(`server ${id}: the mapping points at the hidden copy in ${copies[0]!.cell.name}`);
    const allowed = s.status === 'VERIFY_RESIZE' ? 1 : 0;
    if (hidden.length !== allowed) throw new Error(`server ${id}: ${hidden.length} hidden copies (${hidden.map((c) => c.cell.name).join(', ')}) with status ${s.status}`);
    if (hidden[0] && hidden[0].cell.name === shownCell) throw new Error(`server ${id}: the hidden copy is in the shown cell ${shownCell}`);
  }

  /** The copies checked, then the server removed (confirmed first: a delete in VERIFY_RESIZE is another test's). */
  async function cleanup(f: Fixture): Promise<void> {
    await checkCopies(f.id);
    const s = await rest(f.id);
    if (s?.status === 'DELETED') return;
    if (s?.status === 'VERIFY_RESIZE') {
      await act(f.id, { confirmResize: null }, [204]);
      await settled(nova, f.id, 120_000);
    }
    await call('DELETE', `/servers/${f.id}`, undefined, [204, 404]);
    await eventually(async () => ((await rest(f.id))?.status === 'DELETED' ? true : undefined), `server ${f.id} deleted`, 60_000);
  }

  async function server(): Promise<Fixture> {
    const id = await bootServer(nova, { name: name(), flavor: M1_SMALL, host: 'cmp1' });
    const volume = await createVolume(cinder, 1, 'xcrash-vol');
    await call('POST', `/servers/${id}/os-volume_attachments`, { volumeAttachment: { volumeId: volume } }, [200]);
    await settled(nova, id);
    return { id, host: 'cmp1', volume };
  }

  /** A cell1 server resized into cell2 and waiting in VERIFY_RESIZE. */
  async function resized(): Promise<Fixture> {
    const f = await server();
    await act(f.id, { resize: { flavorRef: M2_SMALL } });
    const s = await settled(nova, f.id, 120_000);
    if (s.status !== 'VERIFY_RESIZE' || !CELL2_HOSTS.includes(s['OS-EXT-SRV-ATTR:host'])) throw new Error(`cross-cell resize ended ${s.status} on ${s['OS-EXT-SRV-ATTR:host']}: ${JSON.stringify(s.fault)}`);
    return f;
  }

  /**
   * The harness counts live attachments per volume and instance (at most one). While VERIFY_RESIZE
   * a volume has two by design (reference §1.10: att_D for the shown copy, the att_S2 placeholder
   * the hidden copy's BDM names): the one a hidden copy names is not counted; any other is.
   * Same keys as the harness's, so these counts replace its.
   */
  async function effects(): Promise<Record<string, number>> {
    const namedByHidden = new Map<string, Set<string>>();
    const hiddenNames = async (uuid: string) => {
      let names = namedByHidden.get(uuid);
      if (!names) {
        names = new Set();
        for (const c of (await findCopies(uuid)).filter((x) => x.instance.hidden)) for (const b of (await loadPartition(c.cell, uuid)).bdms) if (b.attachmentId) names.add(b.attachmentId);
        namedByHidden.set(uuid, names);
      }
      return names;
    };
    const out: Record<string, number> = {};
    for (const a of await scanAllAttachments()) {
      if (!a.instanceUuid) continue;
      const key = `attachments of volume ${a.volumeId} for instance ${a.instanceUuid}`;
      out[key] = (out[key] ?? 0) + ((await hiddenNames(a.instanceUuid)).has(a.id) ? 0 : 1);
    }
    return out;
  }

  const scenario = (
    scenarioName: string,
    setup: () => Promise<Fixture>,
    start: (f: Fixture) => Promise<unknown>,
    done: (f: Fixture, s: Rest) => CrashOutcome | undefined,
  ): CrashScenario<Fixture> => ({
    name: scenarioName,
    timeoutMs: 180_000,
    setup,
    start,
    cleanup,
    effects,
    async outcome(f) {
      const s = await rest(f.id);
      return s ? done(f, s) : undefined;
    },
  });

  return [
    // Finished: VERIFY_RESIZE in cell2. Rolled back: ACTIVE on the source host, migration error.
    scenario('server-cross-cell-resize', server, (f) => act(f.id, { resize: { flavorRef: M2_SMALL } }), (f, s) =>
      s.status === 'VERIFY_RESIZE' && CELL2_HOSTS.includes(s.host ?? '') ? 'finished' : s.status === 'ACTIVE' && s.host === f.host ? 'rolled-back' : undefined,
    ),
    // Finished: ACTIVE in cell2, migration confirmed. Rolled back (Ferry's xcell-confirm-rollback): still on dest, migration error.
    scenario('server-cross-cell-confirm', resized, (f) => act(f.id, { confirmResize: null }, [204]), (_f, s) =>
      s.status === 'ACTIVE' && CELL2_HOSTS.includes(s.host ?? '') ? (s.migration === 'confirmed' ? 'finished' : s.migration === 'error' ? 'rolled-back' : undefined) : undefined,
    ),
    // Finished: ACTIVE on the source host again. Rolled back before the flip: VERIFY_RESIZE in cell2.
    scenario('server-cross-cell-revert', resized, (f) => act(f.id, { revertResize: null }), (f, s) =>
      s.status === 'ACTIVE' && s.host === f.host ? 'finished' : s.status === 'VERIFY_RESIZE' && CELL2_HOSTS.includes(s.host ?? '') ? 'rolled-back' : undefined,
    ),
  ];
}

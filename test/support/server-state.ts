/**
 * What a server request can change, for tests that assert a refusal changed nothing: the
 * compute-api, cell and volume tables (consistent scans) and every compute host's guests as its
 * driver reports them, taken once no machine execution is running (as the fuzz suite does).
 */
import { scanAll } from '../../functions/core/db.js';
import { tableName, type TableKey } from '../../functions/core/tables.js';
import { computeDriverFor } from '../../functions/drivers/compute/registry.js';
import { computeNodes } from '../../functions/servers/engine.js';
import { diffSnapshots, settleExecutions, stableJson, type Snapshot } from './api-state.js';

const TABLES: TableKey[] = ['compute-api', 'cell1', 'cell2', 'volume'];

export async function serverWorldSnapshot(settleMs = 120_000): Promise<Snapshot> {
  await settleExecutions(settleMs);
  const snap: Snapshot = new Map();
  for (const t of TABLES) {
    for (const item of await scanAll({ TableName: tableName(t), ConsistentRead: true })) {
      // A backend's replicationLag is the replication loop's measurement, never a request's doing.
      const { replicationLag: _measured, ...rest } = item;
      snap.set(`${t} ${String(item.pk)}|${String(item.sk)}`, stableJson(String(item.pk).startsWith('BACKEND#') ? rest : item));
    }
  }
  for (const { node } of await computeNodes()) {
    for (const g of await computeDriverFor(node.config).listGuests()) snap.set(`guest ${node.host} ${g.uuid}`, stableJson(g));
  }
  return snap;
}

/** Runs `request` and fails (with the diff) if it changed anything `serverWorldSnapshot` sees. */
export async function changesNothing<T>(request: () => Promise<T>): Promise<T> {
  const before = await serverWorldSnapshot();
  const out = await request();
  const diff = diffSnapshots(before, await serverWorldSnapshot());
  if (diff.length) throw new Error(`the refused request changed state:\n${diff.slice(0, 20).join('\n')}`);
  return out;
}

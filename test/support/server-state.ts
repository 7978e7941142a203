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
  // The tables and the hosts are read side by side, each into its own entries, merged in a fixed
  // order (tables, then hosts), so the snapshot is the one a sequential read would give.
  const [tables, guests] = await Promise.all([
    Promise.all(
      TABLES.map(async (t) =>
        (await scanAll({ TableName: tableName(t), ConsistentRead: true })).map((item) => {
          // A backend's replicationLag is the replication loop's measurement, never a request's doing.
          const { replicationLag: _measured, ...rest } = item;
          return [`${t} ${String(item.pk)}|${String(item.sk)}`, stableJson(String(item.pk).startsWith('BACKEND#') ? rest : item)] as const;
        }),
      ),
    ),
    (async () => Promise.all((await computeNodes()).map(async ({ node }) => (await computeDriverFor(node.config).listGuests()).map((g) => [`guest ${node.host} ${g.uuid}`, stableJson(g)] as const))))(),
  ]);
  return new Map([...tables.flat(), ...guests.flat()]);
}

/** Runs `request` and fails (with the diff) if it changed anything `serverWorldSnapshot` sees. */
export async function changesNothing<T>(request: () => Promise<T>): Promise<T> {
  const before = await serverWorldSnapshot();
  const out = await request();
  const diff = diffSnapshots(before, await serverWorldSnapshot());
  if (diff.length) throw new Error(`the refused request changed state:\n${diff.slice(0, 20).join('\n')}`);
  return out;
}

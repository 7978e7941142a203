/**
 * The replication operations (failovers, failbacks, drills) of a backend, read as the tests need
 * them: a scan of the volume table. No product path lists a backend's operations (the steps read
 * an operation by its id, functions/replication/repo.ts; `ferry ops` reads functions/ops/read.ts).
 */
import { scanAll } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import type { ReplicationOperation } from '../../functions/replication/operation-record.js';
import { backendOf } from '../../functions/volumes/backends.js';

/** Every operation on a backend, newest first. */
export async function listOperations(host: string): Promise<ReplicationOperation[]> {
  const items = await scanAll({
    TableName: tableName('volume'),
    FilterExpression: 'sk = :op AND begins_with(pk, :prefix) AND #host = :host',
    ExpressionAttributeNames: { '#host': 'host' },
    ExpressionAttributeValues: { ':op': 'OP', ':prefix': 'REPLOP#', ':host': backendOf(host) },
  });
  return items.map(({ pk: _pk, sk: _sk, ...op }) => op as unknown as ReplicationOperation).sort((a, b) => b.createdAt.localeCompare(a.createdAt));
}

/**
 * The DynamoDB tables, one per database of the reference services (a cell is its own failure
 * domain, so each cell gets its own table). Read by infra/aws (to create them) and infra/local
 * (to create them in DynamoDB Local), so both always have the same tables with the same keys.
 *
 * Every table has the same key shape: `pk` + `sk` strings, and one GSI `gsi1` (`gsi1pk` +
 * `gsi1sk`) for listings by project or by parent. Items expire by `expiresAt` (epoch seconds).
 */
export interface TableDefinition {
  /** Logical key; the physical name is `tableName(key)`. */
  key: string;
  description: string;
}

export const TABLES = [
  { key: 'volume', description: 'Cinder database: volumes, types, attachments, host connections, services and pools, operations' },
  { key: 'share', description: 'Manila database: shares, instances, access rules, types, networks, migrations' },
  { key: 'compute-api', description: 'Nova API database: host mappings, instance mappings, request specs, flavors' },
  { key: 'cell1', description: 'Nova cell database: instances, block device mappings, migrations, instance actions' },
  { key: 'cell2', description: 'Nova cell database: instances, block device mappings, migrations, instance actions' },
  { key: 'tokens', description: 'API tokens (sha-256 of the token -> user, project, roles), checked by the authorizer' },
] as const satisfies readonly TableDefinition[];

export type TableKey = (typeof TABLES)[number]['key'];

export const GSI1 = 'gsi1';
export const TTL_ATTRIBUTE = 'expiresAt';

/** Physical table name: FERRY_TABLE_<KEY> wins (CDK sets these), else `<prefix><key>`. */
export function tableName(key: TableKey): string {
  const envName = `FERRY_TABLE_${key.toUpperCase().replace(/-/g, '_')}`;
  return process.env[envName] ?? `${process.env.FERRY_TABLE_PREFIX ?? 'ferry-'}${key}`;
}

export function tableEnvName(key: TableKey): string {
  return `FERRY_TABLE_${key.toUpperCase().replace(/-/g, '_')}`;
}

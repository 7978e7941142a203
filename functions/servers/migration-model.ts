/**
 * Nova's Migration record (nova/objects/migration.py) as Ferry keeps it in a cell's table: its
 * types, the status strings the flows use, and the record the API creates (functions/servers/model.ts
 * re-exports them, beside the instance they move).
 */

export type MigrationType = 'migration' | 'resize' | 'live-migration' | 'evacuation';

/** Status strings of nova's Migration across the flows. */
export type MigrationStatus =
  | 'pre-migrating'
  | 'migrating'
  | 'post-migrating'
  | 'finished'
  | 'confirming'
  | 'confirmed'
  | 'reverting'
  | 'reverted'
  | 'error'
  | 'failed'
  | 'preparing'
  | 'queued'
  | 'running'
  | 'completed'
  | 'cancelled'
  | 'accepted'
  | 'done';

export interface Migration {
  /** Integer id of the API (unique per cell, like Nova's autoincrement). */
  id: number;
  uuid: string;
  instanceUuid: string;
  migrationType: MigrationType;
  status: MigrationStatus;
  sourceCompute: string | null;
  sourceNode: string | null;
  destCompute: string | null;
  destNode: string | null;
  destHost: string | null;
  oldInstanceTypeId: number;
  newInstanceTypeId: number;
  crossCellMove: boolean;
  /** Live migration progress (bytes). */
  memoryTotal: number | null;
  memoryProcessed: number | null;
  memoryRemaining: number | null;
  diskTotal: number | null;
  diskProcessed: number | null;
  diskRemaining: number | null;
  projectId: string;
  userId: string;
  createdAt: string;
  updatedAt: string;
}

/** A migration record as the API creates it: the instance's source, no destination yet, no progress. */
export function newMigration(input: {
  id: number;
  uuid: string;
  instance: { uuid: string; host: string | null; node: string | null; flavor: { id: number }; projectId: string; userId: string };
  migrationType: MigrationType;
  status: MigrationStatus;
  destCompute?: string | null;
  newInstanceTypeId?: number;
  userId?: string;
  at: string;
}): Migration {
  const { instance: i } = input;
  return {
    id: input.id,
    uuid: input.uuid,
    instanceUuid: i.uuid,
    migrationType: input.migrationType,
    status: input.status,
    sourceCompute: i.host,
    sourceNode: i.node,
    destCompute: input.destCompute ?? null,
    destNode: null,
    destHost: null,
    oldInstanceTypeId: i.flavor.id,
    newInstanceTypeId: input.newInstanceTypeId ?? i.flavor.id,
    crossCellMove: false,
    memoryTotal: null,
    memoryProcessed: null,
    memoryRemaining: null,
    diskTotal: null,
    diskProcessed: null,
    diskRemaining: null,
    projectId: i.projectId,
    userId: input.userId ?? i.userId,
    createdAt: input.at,
    updatedAt: input.at,
  };
}

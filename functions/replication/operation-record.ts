/**
 * A replication operation's record (failover, failback, drill, drill-end) in the volume table,
 * pk `REPLOP#<id>`, sk `OP`: its shape and key, with no driver behind them, so a reader that only
 * shows operations (functions/ops) need not bundle the volume drivers. repo.ts persists it.
 */
export const operationKey = (id: string) => ({ pk: `REPLOP#${id}`, sk: 'OP' });

/** Volumes per Map item: few enough for one step to finish well inside its timeout, many enough to keep the history small. */
export const FAILOVER_BATCH_SIZE = 200;

export type OperationKind = 'failover' | 'drill' | 'drill-end';

export interface ReplicationOperation {
  id: string;
  kind: OperationKind;
  /** `host@backend` */
  host: string;
  /** What the request asked for: a backend_id, null (the driver picks) or 'default'. */
  requestedBackendId: string | null;
  failback: boolean;
  /** The target the driver resolved (failover/drill), '' for failback. Set by the first step. */
  target?: string;
  /** drill-end: the drill operation whose copies are removed. */
  drillOperationId?: string;
  status: 'running' | 'succeeded' | 'failed';
  batchCount?: number;
  volumeCount?: number;
  volumesDone?: number;
  error?: string;
  requestedBy: string;
  createdAt: string;
  updatedAt: string;
}

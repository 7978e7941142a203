/**
 * The read model of operations (`ferry ops`, `ferry watch`, the console): one shape for every long
 * operation Ferry runs — a share migration (with its copy), a failover, failback or drill of a
 * volume backend, a server operation (live migration, resize, evacuate, shelve, ...) — built from
 * the records the operations themselves keep (views.ts), read with queries on keys and indexes
 * (read.ts). Nothing here writes.
 *
 * An operation is named by a reference `<family>:<id>` that `ferry watch` takes:
 *   share:<share id>              the share's migration (the running one, else the last one)
 *   replication:<operation id>    a failover, failback, drill or drill end
 *   backend:<host@backend>        that backend's running (else last) replication operation
 *   server:<uuid>[@<request id>]  the server's running (else last) operation, or that one
 *   copy:<operation id>           a copy worker's operation record
 * A bare id is looked for as each of share, replication operation, server and copy.
 */
import { BadRequest } from '../core/errors.js';

export type OperationStatus =
  /** Working: its machine runs. */
  | 'running'
  /** A phase ended well and the operation waits for the operator (migration-complete, resize-confirm). */
  | 'waiting'
  | 'succeeded'
  | 'failed'
  | 'cancelled';

/** True when the operation will not move again by itself. */
export const isSettled = (s: OperationStatus): boolean => s !== 'running';

export type ProgressUnit = 'bytes' | 'volumes' | 'percent';

export interface OperationProgress {
  done: number;
  total: number;
  unit: ProgressUnit;
  /** Files, when the work is a tree copy. */
  filesDone?: number;
  filesTotal?: number;
}

export interface OperationView {
  /** What `ferry watch` takes to follow this operation. */
  ref: string;
  /** share-migration | failover | failback | drill | drill-end | copy | a server action (live-migration, resize, migrate, evacuate, shelve, ...) */
  kind: string;
  /** The operation's own id (migration id, operation id, request id). */
  id: string;
  /** What it moves, in words: `share <id> (name): ferry@nfs-a#pool0 -> ferry@nfs-c#pool0`. */
  resource: string;
  /** The step it is at (or ended at), in words. */
  step: string;
  status: OperationStatus;
  /** How far, when the records say: bytes, volumes or a percentage. */
  progress: OperationProgress | null;
  /** done / total in [0, 1]; 1 once succeeded; null when nothing measures it. */
  fraction: number | null;
  /** Units of `progress` per second, from the records' timestamps (ferry watch refines it from its samples). */
  rate: number | null;
  /** Seconds left at that rate. */
  etaSeconds: number | null;
  startedAt: string;
  updatedAt: string;
  endedAt?: string;
  /** Why it failed (or was cancelled), in words. */
  reason?: string;
}

export interface OpsSnapshot {
  at: string;
  /** Operations still running, or paused for the operator. */
  inFlight: OperationView[];
  /** Operations that failed or were cancelled since `since`, newest first. */
  recentFailures: OperationView[];
  /** Operations that succeeded since `since` (only when asked for). */
  recentSuccesses?: OperationView[];
  since: string;
}

export type RefFamily = 'share' | 'replication' | 'backend' | 'server' | 'copy';
const FAMILIES: readonly RefFamily[] = ['share', 'replication', 'backend', 'server', 'copy'];

export interface OperationRef {
  /** Undefined for a bare id: look for it as every family. */
  family?: RefFamily;
  id: string;
  /** server only: the request id of one operation. */
  requestId?: string;
}

/** `share:abc` -> {family: 'share', id: 'abc'}; a wrong family or an empty id is a BadRequest. */
export function parseRef(text: string): OperationRef {
  const raw = text.trim();
  const colon = raw.indexOf(':');
  if (colon < 0) {
    if (!raw) throw new BadRequest('an operation reference is empty');
    return { id: raw };
  }
  const family = raw.slice(0, colon) as RefFamily;
  const rest = raw.slice(colon + 1);
  if (!FAMILIES.includes(family)) throw new BadRequest(`unknown kind of operation "${raw.slice(0, colon)}" in "${raw}": use one of ${FAMILIES.map((f) => `${f}:ID`).join(', ')}`);
  if (family === 'server' && rest.includes('@')) {
    const [id, requestId] = rest.split('@', 2) as [string, string];
    if (!id || !requestId) throw new BadRequest(`"${raw}" is not server:UUID or server:UUID@REQUEST_ID`);
    return { family, id, requestId };
  }
  if (!rest) throw new BadRequest(`"${raw}" names no id`);
  return { family, id: rest };
}

export function formatRef(ref: OperationRef): string {
  const id = ref.requestId ? `${ref.id}@${ref.requestId}` : ref.id;
  return ref.family ? `${ref.family}:${id}` : id;
}

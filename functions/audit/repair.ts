/**
 * The repairs `ferry audit --repair` and the reconciler make after an audit: only what is provably
 * safe, each re-checked right before it acts under the same conditions the operations use, each
 * logged with what it saw. Every other finding is reported and left for an operator.
 *
 * Repairable kinds (REPAIRABLE_KINDS), and why each is safe:
 * - `pending-connect`, `pending-disconnect`: a connect intent of a call that died, a deleted
 *   attachment's disconnect not seen through, a delete by id that died after cutting a live
 *   attachment's connection. Finished or undone by the attachments service's
 *   recovery (attachments/recovery.ts) in the reconciler's first step, under its conditions.
 * - `orphan-host-connection`: a backend export of a volume to a host that no attachment uses. The
 *   attachments service terminates it only if the volume still lists no user on that host, then
 *   writes its host fence, so a connect racing the repair fails its versioned write and connects
 *   again (terminateUnusedConnection, the same path a detach takes).
 * - `attachment-without-bdm`: an attachment of a server that no BDM and no operation holds, not
 *   changed since the grace cut-off. Re-checked in the instance's partition (no operation on the
 *   instance, no BDM naming it) and on the attachment itself, then deleted through the attachments
 *   service as Nova's service user. No later operation can adopt it: an operation only ever uses
 *   attachments it names in its own holds, under ids derived from its own request.
 * - `share-quota-unenforced`, `stray-share-replication`: an aws-efs share's writes withheld or
 *   given back by its size, a replication no migration holds deleted with its replica; each behind
 *   a recorded intent, re-checked against the share records (share-backend-repairs.ts says why).
 * - `stray-copy-task-definition`: the copy task definition family of a migration that ended or is
 *   gone, deregistered once older than the grace period, behind a recorded intent
 *   (copy-task-repairs.ts says why).
 * - `failover-replica-left`: what a failover brought up for volumes no record holds and recorded
 *   as left (its intent), removed once the failover ended, then the record (replica-left-repairs.ts).
 * - `replica-unowned`: a volume a replication made on a site that nothing holds, deleted once past
 *   its grace, available and still unowned on a fresh read (replica-unowned.ts says why).
 *
 * The rest (a missing backend object, a capacity count, a guest, a mapping...) is reported: the
 * audit sees two records that disagree but cannot prove which one is right.
 */
import { terminateUnusedConnection } from '../attachments/recovery.js';
import { getAttachmentRecord } from '../attachments/repo.js';
import { deleteAttachment } from '../attachments/service.js';
import type { AuthContext } from '../core/auth.js';
import { NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { findServer, loadPartition } from '../servers/repo.js';
import type { AuditFinding } from './findings.js';
import { REPLICA_LEFT_REPAIRS, removeLeftReplicas } from './replica-left-repairs.js';
import { REPLICA_UNOWNED_REPAIRS, removeUnownedReplica } from './replica-unowned.js';
import { repairShareBackendFinding, SHARE_BACKEND_REPAIRS } from './share-backend-repairs.js';

/** Nova's service user, as the server flows call the attachments service (servers/cinder.ts). */
const NOVA_SERVICE: AuthContext = { userId: 'nova', projectId: 'service', isAdmin: true, roles: ['admin', 'service'] };

/** What one repair saw and did. */
export interface RepairRecord {
  /** The audit finding's kind, or the intent's (`pending-connect`, `operation-without-execution`, ...). */
  kind: string;
  resource: string;
  /** What the repair saw when it re-checked, right before acting. */
  saw: string;
  /** What it did (or, when `outcome` is `left`, why it did nothing). */
  did: string;
  /** repaired: it acted; left: the re-check found the resource in use or changed; failed: the action failed (logged, the finding stays). */
  outcome: 'repaired' | 'left' | 'failed';
}

/** The kinds a repair may act on, each with what it does. Everything else is an operator's. */
export const REPAIRABLE_KINDS: Readonly<Record<string, string>> = {
  'pending-connect': 'undoes the connect intent of a call that died: the export goes unless an attachment uses the host, the intent is cleared',
  'pending-disconnect': 'finishes the disconnect a deleted attachment left (the export goes unless an attachment uses the host again), or makes again the connection a delete by id that died cut from a live attachment, and clears its intent',
  'orphan-host-connection': 'terminates the backend export no attachment uses, under the attachments service host fence',
  'attachment-without-bdm': 'deletes the attachment no BDM and no server operation holds, once unchanged for the grace period',
  // A share backend's quota and stray replications (share-backend-repairs.ts says why each is safe).
  ...SHARE_BACKEND_REPAIRS,
  ...REPLICA_LEFT_REPAIRS,
  ...REPLICA_UNOWNED_REPAIRS,
};

/** The kinds repairFinding acts on after the audit (the others in REPAIRABLE_KINDS are intents, finished before the audit). */
const AFTER_AUDIT = new Set(['orphan-host-connection', 'attachment-without-bdm', ...Object.keys(SHARE_BACKEND_REPAIRS), ...Object.keys(REPLICA_LEFT_REPAIRS), ...Object.keys(REPLICA_UNOWNED_REPAIRS)]);

export interface RepairContext {
  /** Only what has not changed since this instant is repaired (now less the grace period). */
  before: Date;
}

/** Repairs one finding if its kind is repairable; undefined when it is not (it stays reported). */
export async function repairFinding(finding: AuditFinding, context: RepairContext): Promise<RepairRecord | undefined> {
  if (!AFTER_AUDIT.has(finding.kind) || !finding.ref) return undefined;
  const base = { kind: finding.kind, resource: finding.resource };
  try {
    const record =
      (await repairShareBackendFinding(finding.kind, finding.ref, context.before)) ??
      (finding.kind === 'failover-replica-left' ? await removeLeftReplicas(finding.ref, context.before) : undefined) ??
      (finding.kind === 'replica-unowned' ? await removeUnownedReplica(finding.ref, context.before) : undefined) ??
      (finding.kind === 'attachment-without-bdm' ? await deleteUnusedAttachment(finding.ref, context) : await terminateExport(finding.ref));
    return { ...base, ...record };
  } catch (e) {
    // A failed repair leaves the finding in place; the next run tries again.
    logger.error('a repair failed; the finding stays', { ...base, error: e as Error });
    return { ...base, saw: finding.detail, did: `the repair failed (${(e as Error).name}: ${(e as Error).message}); the next run tries again`, outcome: 'failed' };
  }
}

type Outcome = Omit<RepairRecord, 'kind' | 'resource'>;

async function terminateExport(ref: Record<string, string>): Promise<Outcome> {
  const { volumeId, host } = ref;
  if (!volumeId || !host) return { saw: 'a finding without its volume and host', did: 'nothing', outcome: 'left' };
  const saw = `volume ${volumeId} exported to host ${host} with no attachment using it`;
  const result = await terminateUnusedConnection(volumeId, host, { host });
  if (result === 'terminated') return { saw, did: `terminated the export of volume ${volumeId} to host ${host}`, outcome: 'repaired' };
  if (result === 'in-use') return { saw, did: `left it: an attachment uses host ${host} again`, outcome: 'left' };
  return { saw, did: `left it: volume ${volumeId} no longer exists`, outcome: 'left' };
}

async function deleteUnusedAttachment(ref: Record<string, string>, context: RepairContext): Promise<Outcome> {
  const { attachmentId, instanceUuid } = ref;
  if (!attachmentId || !instanceUuid) return { saw: 'a finding without its attachment and server', did: 'nothing', outcome: 'left' };
  const leave = (saw: string) => ({ saw, did: 'left it', outcome: 'left' as const });

  // The instance's partition now: an operation in flight may be about to record it (its holds),
  // and a BDM may have taken it since the audit read.
  const server = await findServer(instanceUuid);
  if (!server) return leave(`server ${instanceUuid} no longer exists`);
  const { instance, bdms } = await loadPartition(server.cell, instanceUuid);
  if (!instance) return leave(`server ${instanceUuid} no longer exists`);
  if (instance.operation) return leave(`server ${instanceUuid} is in operation ${instance.operation.kind} (${instance.operation.requestId})`);
  const bdm = bdms.find((b) => b.attachmentId === attachmentId);
  if (bdm) return leave(`BDM ${bdm.uuid} of server ${instanceUuid} uses it`);

  const attachment = await getAttachmentRecord(attachmentId);
  if (!attachment || attachment.deleted) return leave(`attachment ${attachmentId} is already deleted`);
  if (Date.parse(attachment.updatedAt) >= context.before.getTime()) {
    return leave(`attachment ${attachmentId} changed at ${attachment.updatedAt}, within the grace period (before ${context.before.toISOString()})`);
  }
  const saw = `attachment ${attachmentId} (${attachment.attachStatus}, volume ${attachment.volumeId}, host ${attachment.attachedHost ?? 'none'}) of server ${instanceUuid}, unchanged since ${attachment.updatedAt}; the server has no operation and no BDM using it`;
  try {
    await deleteAttachment({ auth: NOVA_SERVICE, attachmentId });
  } catch (e) {
    if (e instanceof NotFound) return leave(`${saw}; it was deleted meanwhile`);
    throw e;
  }
  return { saw, did: `deleted attachment ${attachmentId} as Nova's service user`, outcome: 'repaired' };
}

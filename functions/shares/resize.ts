/**
 * Share extend and shrink (M/api/v2/shares.py _extend/_shrink, M/share/api.py extend/shrink,
 * M/share/manager.py extend_share/shrink_share). Done inside the API request, as access rules are
 * (access.ts): the driver call records or checks a size and takes milliseconds (local) to a few
 * AWS calls (aws-efs), where upstream casts to the share manager.
 *
 * Order: the request checked (400 and nothing written), then one transaction records the resize
 * as the intent of the driver call (status `extending`/`shrinking`, `resize` with an id derived
 * from the share's version) and, for an extend, charges the extra gigabytes to the project and
 * reserves them on the share's pool. Then the driver call, under that resize, and one transaction
 * that settles it (resize-transitions.ts endResize) and gives back what the outcome frees. A crash
 * between the two leaves the intent, which the reconciler finishes (resize-recovery.ts): the
 * driver calls are idempotent at the size asked.
 */
import { json, type ApiRequest } from '../core/api.js';
import { cancellationCodes, isConditionFailure, withRetries } from '../core/db.js';
import { BadRequest, ConcurrentModification, FerryError } from '../core/errors.js';
import { intentId } from '../core/intents.js';
import { logger } from '../core/logger.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { boolFromString } from '../core/strutils.js';
import { tableName } from '../core/tables.js';
import { isShareSizeRestorer, ShareShrinkingPossibleDataLoss, type ShareDriver } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { recordMessage } from '../messages/store.js';
import { releaseItem } from '../quotas/engine.js';
import { backendShareName, sharePoolKey, sharePoolOf, type Share } from './model.js';
import { countLegacyShares, writeShareGrowth } from './quotas.js';
import { getShareBackend, getShareOrThrow, releaseSharePoolItem, shareUpdate, writeShareWith, type TransactItem } from './repo.js';
import { beginExtend, beginShrink, endResize, freedBy, InvalidInput, type ResizeOutcome } from './resize-transitions.js';
import { reserveSharePoolItem } from './scheduler.js';
import { getShareTypeById } from './types.js';
import { isObject } from './validation.js';

registerPolicies({ 'share:extend': 'admin_or_owner', 'share:force_extend': 'admin_api', 'share:shrink': 'admin_or_owner' });

const now = () => new Date().toISOString();
const SIZE_MESSAGE = 'New share size must be specified as an integer.';

/** Python's int() of the body's new_size, as upstream reads it (a float is truncated, a bool is 0/1); anything else 400. */
export function newSizeOf(args: unknown): number {
  const v = isObject(args) ? args.new_size : undefined;
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v === 'number' && Number.isFinite(v)) return Math.trunc(v);
  if (typeof v === 'string' && /^\s*[-+]?\d+\s*$/.test(v)) return Number(v);
  throw new BadRequest(SIZE_MESSAGE);
}

/** `force` of extend (2.64+; dropped before): bool_from_string(strict=True), absent is false. */
export function forceOf(args: unknown): boolean {
  if (!isObject(args) || args.force === undefined) return false;
  const b = boolFromString(typeof args.force === 'number' ? String(args.force) : args.force);
  if (b === undefined) throw new BadRequest(`Invalid boolean force : ${String(args.force)}`);
  return b;
}

/** share_types.provision_filter_on_size for the new size. */
async function checkTypeSize(s: Share, size: number): Promise<void> {
  const type = await getShareTypeById(s.shareTypeId);
  const minSpec = type.extraSpecs['provisioning:min_share_size'];
  const maxSpec = type.extraSpecs['provisioning:max_share_size'];
  if (minSpec && Number.isFinite(Number(minSpec)) && size < Number(minSpec)) {
    throw new InvalidInput(`Specified share size of '${size}' is less than the minimum required size of '${minSpec}' for share type '${type.name}'.`);
  }
  if (maxSpec && Number.isFinite(Number(maxSpec)) && size > Number(maxSpec)) {
    throw new InvalidInput(`Specified share size of '${size}' is greater than the maximum allowable size of '${maxSpec}' for share type '${type.name}'.`);
  }
}

/** The pool's part of an extend: within its capacity (the scheduler's host_passes_filters), or with force beside it. */
async function poolItems(s: Share, gb: number, force: boolean): Promise<TransactItem[]> {
  if (!s.capacity) return [];
  const pool = s.capacity.pool;
  if (force) {
    // force skips the scheduler (M/share/api.py): the pool's allocation grows whatever it holds.
    return [{ Update: { TableName: tableName('share'), Key: sharePoolKey(pool), UpdateExpression: 'SET host = :host ADD allocatedGb :gb', ExpressionAttributeValues: { ':host': pool, ':gb': gb } } }];
  }
  const caps = await shareDriverFor(await getShareBackend(pool)).capabilities();
  const total = caps.find((c) => c.pool === sharePoolOf(pool))?.totalCapacityGb ?? 0;
  return [reserveSharePoolItem(pool, gb, total)];
}

const resizeIdOf = (s: Share) => intentId(s.id, 'resize', String(s.version));

/** Records an extend (quota and pool in the same transaction); 'no-valid-host' when the pool cannot hold it. */
async function recordExtend(shareId: string, newSize: number, force: boolean): Promise<string | 'no-valid-host'> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const before = await getShareOrThrow(shareId);
    const after = beginExtend(before, { at: now(), newSize, resizeId: resizeIdOf(before) });
    if (after instanceof FerryError) throw after;
    if (attempt === 0) await checkTypeSize(before, newSize);
    if (!before.quota) {
      // A share from before quotas: counted first (at its size), so the extra gigabytes are charged once.
      await countLegacyShares(before.projectId);
      continue;
    }
    const gb = newSize - before.size;
    const pool = await poolItems(before, gb, force);
    try {
      await writeShareGrowth(before.projectId, newSize, gb, [{ Update: shareUpdate(before, after) }, ...pool]);
      return after.resize!.id;
    } catch (e) {
      const codes = cancellationCodes(e);
      if (pool.length && codes[1] === 'ConditionalCheckFailed') return 'no-valid-host';
      if (codes[0] === 'ConditionalCheckFailed' || codes.includes('TransactionConflict')) continue;
      throw e;
    }
  }
  throw new ConcurrentModification(`Share ${shareId}`);
}

async function recordShrink(shareId: string, newSize: number): Promise<string> {
  return withRetries(
    async () => {
      const before = await getShareOrThrow(shareId);
      const after = beginShrink(before, { at: now(), newSize, resizeId: resizeIdOf(before) });
      if (after instanceof FerryError) throw after;
      await checkTypeSize(before, newSize);
      await writeShareWith(before, after, []);
      return after.resize!.id;
    },
    { attempts: 5, retryable: isConditionFailure },
  ).catch((e) => {
    if (isConditionFailure(e)) throw new ConcurrentModification(`Share ${shareId}`, e);
    throw e;
  });
}

/** Ends the resize with its outcome, giving back what it frees in the same transaction. */
async function settleResize(shareId: string, resizeId: string, outcome: ResizeOutcome, reason?: string): Promise<Share> {
  return withRetries(
    async () => {
      const before = await getShareOrThrow(shareId);
      const after = endResize(before, { at: now(), resizeId, outcome, reason });
      if (after instanceof FerryError) throw after;
      if (after === before) return before;
      const freed = freedBy(before, after);
      const items = [
        releaseItem('share', before.projectId, { gigabytes: freed.quotaGb }),
        freed.poolGb && before.capacity ? releaseSharePoolItem(before.capacity.pool, freed.poolGb) : undefined,
      ].filter((i): i is TransactItem => i !== undefined);
      return writeShareWith(before, after, items);
    },
    { attempts: 20, retryable: (e) => isConditionFailure(e) || cancellationCodes(e).includes('TransactionConflict') },
  );
}

type ResizeCall = (name: string, newSizeGb: number) => Promise<void>;

/** The driver's extendShare / shrinkShare, when it has one (upstream's NotImplementedError otherwise). */
function resizeCall(driver: ShareDriver, kind: 'extend' | 'shrink'): ResizeCall | undefined {
  const m = (driver as unknown as Record<string, unknown>)[kind === 'extend' ? 'extendShare' : 'shrinkShare'];
  return typeof m === 'function' ? (m as ResizeCall).bind(driver) : undefined;
}

/**
 * The compensation of a failed resize, which upstream does not make (docs/compatibility.md): the
 * driver may have failed half-way (aws-efs: the quota tag set, the policy not), so the backend is
 * put back to the size the share keeps recording; then an admin's reset_status to available is
 * true of the backend too: restoreShareSize where the driver has it (ShareSizeRestorer: no data-loss
 * check, as this undoes Ferry's own change), else the opposite call. Idempotent at the size asked. Returns what it did, for
 * the share's error reason; its own failure is logged and said there, not thrown: the error state
 * is what the share gets either way.
 */
async function putBackendBack(driver: ShareDriver, s: Share, kind: 'extend' | 'shrink'): Promise<string> {
  const r = s.resize!;
  // Not a shrink where the driver can restore: a shrink would refuse when the share holds more
  // than the old size, leaving the raised size on the backend (share-size-mismatch in the audit).
  const back = isShareSizeRestorer(driver) ? driver.restoreShareSize.bind(driver) : resizeCall(driver, kind === 'extend' ? 'shrink' : 'extend');
  if (!back) return `The backend cannot be put back to ${r.fromGb} GiB by its driver.`;
  try {
    await back(backendShareName(s.instanceId), r.fromGb);
    return `The backend was put back to ${r.fromGb} GiB.`;
  } catch (e) {
    logger.error(`putting a share back to its size after a failed ${kind} failed`, { shareId: s.id, resizeId: r.id, error: e as Error });
    return `Putting the backend back to ${r.fromGb} GiB failed too: ${e instanceof Error ? e.message : String(e)}`;
  }
}

/** M/message/message_field.py: action 008 extend / 009 shrink, and the detail of each outcome. */
function messageFor(kind: 'extend' | 'shrink', outcome: ResizeOutcome): { actionId: string; detailId: string } | undefined {
  if (outcome === 'done') return undefined;
  if (kind === 'extend') return { actionId: '008', detailId: '015' };
  // Upstream records none for a failed shrink (only its log says it); Ferry tells the user (docs/compatibility.md).
  return { actionId: '009', detailId: outcome === 'refused-data-loss' ? '018' : outcome === 'unsupported' ? '019' : '001' };
}

/**
 * The driver call of the resize `resizeId` and its settlement; a share no longer in that resize is
 * left as it is. Called by the API action and by the reconciler (resize-recovery.ts).
 */
export async function runResize(shareId: string, resizeId: string): Promise<{ share: Share; outcome?: ResizeOutcome; reason?: string }> {
  const s = await getShareOrThrow(shareId);
  const r = s.resize;
  if (!r || r.id !== resizeId || !s.host) return { share: s };
  const driver = shareDriverFor(await getShareBackend(s.host));
  const call = resizeCall(driver, r.kind);
  let outcome: ResizeOutcome = 'done';
  let reason: string | undefined;
  if (!call) {
    outcome = 'unsupported';
    reason = `The ${driver.kind} share driver does not ${r.kind} shares.`;
  } else {
    try {
      await call(backendShareName(s.instanceId), r.toGb);
    } catch (e) {
      logger.error(`${r.kind} of a share failed on its backend`, { shareId, resizeId, error: e as Error });
      outcome = e instanceof ShareShrinkingPossibleDataLoss && r.kind === 'shrink' ? 'refused-data-loss' : 'failed';
      reason = e instanceof Error ? e.message : String(e);
      if (outcome === 'failed') reason = `${reason} ${await putBackendBack(driver, s, r.kind)}`;
    }
  }
  const share = await settleResize(shareId, resizeId, outcome, reason);
  const msg = messageFor(r.kind, outcome);
  if (msg) await recordMessage('share', { key: [shareId, resizeId, outcome], projectId: s.projectId, resourceType: 'SHARE', resourceId: shareId, ...msg });
  return { share, outcome, reason };
}

export async function extend(req: ApiRequest, share: Share, args: unknown): Promise<ReturnType<typeof json>> {
  authorize(req.auth, 'share:extend', share);
  const newSize = newSizeOf(args);
  // force came in 2.64; before, upstream drops it from the body.
  const force = req.version.atLeast('2.64') ? forceOf(args) : false;
  if (force) authorize(req.auth, 'share:force_extend', share);
  const resizeId = await recordExtend(share.id, newSize, force);
  if (resizeId === 'no-valid-host') {
    // M/scheduler/manager.py extend_share: NoValidHost leaves the share available with a message; the request was accepted.
    await recordMessage('share', { key: [share.id, resizeIdOf(share), 'no-valid-host'], projectId: share.projectId, resourceType: 'SHARE', resourceId: share.id, actionId: '008', detailId: '002' });
    return json(202);
  }
  await runResize(share.id, resizeId);
  return json(202);
}

export async function shrink(req: ApiRequest, share: Share, args: unknown): Promise<ReturnType<typeof json>> {
  authorize(req.auth, 'share:shrink', share);
  const newSize = newSizeOf(args);
  const resizeId = await recordShrink(share.id, newSize);
  await runResize(share.id, resizeId);
  return json(202);
}

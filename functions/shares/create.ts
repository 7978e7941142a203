/**
 * `POST /shares` (M/api/v2/shares.py create): validation, the share recorded `creating` (its type's
 * and network's share counts in the same transaction), then the share-create machine named from
 * the share id. A machine that cannot be started takes the record back with it.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { intentId } from '../core/intents.js';
import { logger } from '../core/logger.js';
import { registerPolicies } from '../core/policy.js';
import { type Share } from './model.js';
import { getShareNetwork } from './networks.js';
import { insertShare, removeShareRecord } from './repo.js';
import { DEFAULT_SHARE_TYPE, getShareTypeByName, getShareTypeByNameOrId } from './types.js';
import { undoOrRecord } from './undo.js';
import { body, metadataOf, optionalText, protoOf, sizeOf, strictBool } from './validation.js';
import { shareDetail, shareViewContext } from './views.js';

registerPolicies({ 'share:create': '@' });

const now = () => new Date().toISOString();

export interface CreateShareRequest {
  size: number;
  shareProto: 'NFS' | 'CIFS';
  name: string | null;
  description: string | null;
  shareType: string | null;
  shareNetworkId: string | null;
  availabilityZone: string | null;
  metadata: Record<string, string>;
  isPublic: boolean;
}

export function parseCreateShare(raw: unknown): CreateShareRequest {
  const b = body(raw, 'share');
  if (b.snapshot_id !== undefined && b.snapshot_id !== null) throw new BadRequest('Creating a share from a snapshot is not supported by Ferry.');
  if (b.share_group_id !== undefined && b.share_group_id !== null) throw new BadRequest('Share groups are not supported by Ferry.');
  const shareProto = protoOf(b.share_proto);
  const size = sizeOf(b.size);
  const name = optionalText(b, 'name') ?? optionalText(b, 'display_name') ?? null;
  const description = optionalText(b, 'description', 10_000) ?? optionalText(b, 'display_description', 10_000) ?? null;
  const typeRef = b.share_type ?? b.volume_type ?? null;
  if (typeRef !== null && typeof typeRef !== 'string') throw new BadRequest('share_type must be a string.');
  const net = b.share_network_id ?? null;
  if (net !== null && typeof net !== 'string') throw new BadRequest('share_network_id must be a string.');
  const az = optionalText(b, 'availability_zone') ?? null;
  return {
    size,
    shareProto,
    name,
    description,
    shareType: typeRef || null,
    shareNetworkId: net || null,
    availabilityZone: az || null,
    metadata: metadataOf(b.metadata),
    isPublic: b.is_public === undefined || b.is_public === null ? false : strictBool('is_public', b.is_public),
  };
}

export async function recordNewShare(auth: AuthContext, r: CreateShareRequest, id: string = randomUUID()): Promise<Share> {
  const type = r.shareType ? await getShareTypeByNameOrId(r.shareType).catch((e) => {
    if (e instanceof NotFound) throw new NotFound(`Share type ${r.shareType} could not be found.`);
    throw e;
  }) : await getShareTypeByName(DEFAULT_SHARE_TYPE);
  if (!type) throw new BadRequest('Invalid share type: no share type given and no default share type is configured.');
  const dhss = strictBool('driver_handles_share_servers', type.extraSpecs.driver_handles_share_servers ?? 'False');
  if (r.shareNetworkId) {
    await getShareNetwork(auth, r.shareNetworkId);
    if (!dhss) throw new BadRequest(`Share network ID should not be provided when using a share type with driver_handles_share_servers extra spec set to False.`);
  } else if (dhss) {
    throw new BadRequest('Share network must be set when the driver_handles_share_servers extra spec of the share type is True.');
  }
  const at = now();
  const s: Share = {
    id,
    projectId: auth.projectId,
    userId: auth.userId,
    name: r.name,
    description: r.description,
    size: r.size,
    shareProto: r.shareProto,
    status: 'creating',
    taskState: null,
    shareTypeId: type.id,
    shareTypeName: type.name,
    shareNetworkId: r.shareNetworkId,
    availabilityZone: r.availabilityZone,
    metadata: r.metadata,
    isPublic: r.isPublic,
    // The backend share is made under the instance id: derived from the share's, never a second one.
    instanceId: intentId(id, 'instance'),
    host: null,
    exportLocations: [],
    capacity: null,
    ownsBackendShare: false,
    accessRules: {},
    errorReason: null,
    migration: null,
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  await insertShare(s);
  return s;
}

export async function create(req: ApiRequest) {
  const s = await recordNewShare(req.auth, parseCreateShare(req.body));
  try {
    await startExecution('share-create', executionName('share-create', s.id), { shareId: s.id });
  } catch (e) {
    logger.error('could not start share-create', { shareId: s.id, error: e as Error });
    await undoOrRecord(() => removeShareRecord(s), { what: 'the share record (creating, no capacity, nothing on a backend)', shareId: s.id });
    throw e;
  }
  return json(202, { share: shareDetail(shareViewContext(req), s) });
}

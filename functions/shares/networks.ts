/**
 * Manila share networks (M/api/v2/share_networks.py), as records only: Ferry's backends run with
 * driver_handles_share_servers=False, so a network is never wired to anything; shares may name one
 * and migration may move a share to a new one.
 *
 * "A network in use by a share cannot be deleted" is a condition of the delete: the network's
 * `shareCount` moves with its shares in their own transactions (repo.ts networkCountItem), so no
 * listing of shares is read and no share can slip in between a check and the delete.
 */
import { DeleteCommand, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import type { AuthContext } from '../core/auth.js';
import { db, isConditionFailure, queryAll, scanAll } from '../core/db.js';
import { BadRequest } from '../core/errors.js';
import { registerPolicies } from '../core/policy.js';
import { GSI1, tableName } from '../core/tables.js';
import { shareNetworkKey, upstreamTime, type ShareNetwork } from './model.js';
import { shareNetworkNotFound } from './repo.js';
import { body, optionalText } from './validation.js';

registerPolicies({
  'share_network:create': '@',
  'share_network:index': '@',
  'share_network:detail': '@',
  'share_network:show': '@',
  'share_network:delete': '@',
});

export async function getShareNetwork(auth: AuthContext, id: string): Promise<ShareNetwork> {
  const out = await db().send(new GetCommand({ TableName: tableName('share'), Key: shareNetworkKey(id), ConsistentRead: true }));
  const n = out.Item as ShareNetwork | undefined;
  if (!n || (!auth.isAdmin && n.projectId !== auth.projectId)) throw shareNetworkNotFound(id);
  return n;
}

function view(req: ApiRequest, n: ShareNetwork, detail: boolean): Record<string, unknown> {
  if (!detail) return { id: n.id, name: n.name };
  const v: Record<string, unknown> = {
    id: n.id,
    name: n.name,
    description: n.description,
    project_id: n.projectId,
    created_at: upstreamTime(n.createdAt),
    updated_at: upstreamTime(n.updatedAt),
    neutron_net_id: n.neutronNetId,
    neutron_subnet_id: n.neutronSubnetId,
    network_type: null,
    segmentation_id: null,
    cidr: null,
    ip_version: null,
    gateway: null,
    mtu: null,
  };
  if (req.version.atLeast('2.49')) v.share_network_subnets = [];
  if (req.version.atLeast('2.63')) {
    v.status = 'active';
    v.security_service_update_support = false;
  }
  return v;
}

async function create(req: ApiRequest) {
  const b = body(req.body, 'share_network');
  const at = new Date().toISOString();
  const n: ShareNetwork = {
    id: randomUUID(),
    projectId: req.auth.projectId,
    userId: req.auth.userId,
    name: optionalText(b, 'name') ?? null,
    description: optionalText(b, 'description') ?? null,
    neutronNetId: optionalText(b, 'neutron_net_id', 36) ?? null,
    neutronSubnetId: optionalText(b, 'neutron_subnet_id', 36) ?? null,
    availabilityZone: optionalText(b, 'availability_zone') ?? null,
    createdAt: at,
    updatedAt: at,
  };
  await db().send(new PutCommand({ TableName: tableName('share'), Item: { ...shareNetworkKey(n.id), gsi1pk: `PROJ#${n.projectId}#SNET`, gsi1sk: `${at}#${n.id}`, ...n }, ConditionExpression: 'attribute_not_exists(pk)' }));
  return json(200, { share_network: view(req, n, true) });
}

async function list(req: ApiRequest, detail: boolean) {
  const allTenants = req.auth.isAdmin && ['1', 'true', 'True'].includes(req.query.get('all_tenants') ?? '');
  const items = (
    allTenants
      ? await scanAll({ TableName: tableName('share'), FilterExpression: 'sk = :s', ExpressionAttributeValues: { ':s': 'SNET' } })
      : await queryAll({ TableName: tableName('share'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': `PROJ#${req.auth.projectId}#SNET` } })
  ) as unknown as ShareNetwork[];
  const name = req.query.get('name');
  return json(200, { share_networks: items.filter((n) => !name || n.name === name).map((n) => view(req, n, detail)) });
}

async function remove(req: ApiRequest) {
  const n = await getShareNetwork(req.auth, req.params.id!);
  try {
    await db().send(
      new DeleteCommand({
        TableName: tableName('share'),
        Key: shareNetworkKey(n.id),
        ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(shareCount) OR shareCount <= :none)',
        ExpressionAttributeValues: { ':none': 0 },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    // The failed condition returns the item: none means another request deleted it first.
    if (!(e as { Item?: unknown }).Item) throw shareNetworkNotFound(n.id);
    throw new BadRequest(`Network ${n.id} is in use by shares.`);
  }
  return json(202);
}

export const shareNetworkRoutes: RouteSpec[] = [
  { method: 'POST', path: '/share-networks', action: 'share_network:create', handler: create },
  { method: 'GET', path: '/share-networks', action: 'share_network:index', handler: (req) => list(req, false) },
  { method: 'GET', path: '/share-networks/detail', action: 'share_network:detail', handler: (req) => list(req, true) },
  { method: 'GET', path: '/share-networks/{id}', action: 'share_network:show', handler: async (req) => json(200, { share_network: view(req, await getShareNetwork(req.auth, req.params.id!), true) }) },
  { method: 'DELETE', path: '/share-networks/{id}', action: 'share_network:delete', handler: remove },
];

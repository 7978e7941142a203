/**
 * GET/DELETE /messages of Cinder (C/api/v3/messages.py, 3.3+; views C/api/v3/views/messages.py)
 * and Manila (M/api/v2/messages.py, 2.37+; views M/api/views/messages.py), with the action and
 * detail texts of C/message/message_field.py and M/message/message_field.py that Ferry records.
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { NotFound } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { TableKey } from '../core/tables.js';
import { deleteMessage, getMessage, listMessages, MESSAGE_TTL_SECONDS, type UserMessage } from './store.js';

/** C/message/message_field.py: the actions and details Ferry records (ids as upstream). */
export const CINDER_ACTIONS: Record<string, string> = {
  '001': 'schedule allocate volume',
  '002': 'attach volume',
  '004': 'update attachment',
  '007': 'extend volume',
  '008': 'create volume from backend storage',
  '009': 'create snapshot',
  '010': 'delete snapshot',
};
export const CINDER_DETAILS: Record<string, string> = {
  '001': 'An unknown error occurred.',
  '003': 'Could not find any available weighted backend.',
  '006': 'Not enough quota resource for operation.',
  '010': 'Volume Driver failed to extend volume.',
  '012': 'Driver failed to create the volume.',
  '013': 'Snapshot failed to create.',
  '016': 'Snapshot failed to delete.',
  '021': 'Failed to attach volume.',
  '022': 'Failed to detach volume.',
};

/**
 * M/message/message_field.py, plus Ferry's own action for a share migration (upstream records no
 * message for one): its ids are above upstream's range so they never mean something else there.
 */
export const MANILA_ACTIONS: Record<string, string> = {
  '001': 'allocate host',
  '002': 'create',
  '007': 'delete',
  '008': 'extend',
  '009': 'shrink',
  '010': 'update access rules',
  '901': 'migrate',
};
/** Ferry's action and detail ids of a failed share migration (manila message-list shows them with the reason). */
export const MIGRATE_ACTION = '901';
export const MIGRATION_FAILED_DETAIL = '901';
export const MANILA_DETAILS: Record<string, string> = {
  '001': 'An unknown error occurred.',
  '002': 'No storage could be allocated for this share request. Trying again with a different size or share type may succeed.',
  '015':
    'Share Driver failed to extend share, The share status has been set to extending_error. This action cannot be re-attempted until the status has been rectified. Contact your administrator to determine the cause of this failure.',
  '018':
    'Share Driver refused to shrink the share. The size to be shrunk is smaller than the current used space. The share status has been set to available. Please select a size greater than the current used space.',
  '019': 'Share Driver does not support shrinking shares. Shrinking share operation failed.',
  '901': 'Share migration failed.',
};

export const MESSAGE_POLICIES = { get: 'message:get', getAll: 'message:get_all', delete: 'message:delete' } as const;
registerPolicies({ [MESSAGE_POLICIES.get]: 'admin_or_owner', [MESSAGE_POLICIES.getAll]: 'admin_or_owner', [MESSAGE_POLICIES.delete]: 'admin_or_owner' });

const upstreamTime = (s: string) => s.replace('Z', '').replace(/\.(\d{3})$/, '.$1000');
/** created_at + message_ttl, to the microsecond as upstream's expires_at (the TTL attribute holds whole seconds). */
const expiry = (m: UserMessage) => upstreamTime(new Date(Date.parse(m.createdAt) + MESSAGE_TTL_SECONDS * 1000).toISOString());

function links(req: ApiRequest, versionPath: string, m: UserMessage) {
  const root = req.baseUrl.slice(0, req.baseUrl.length - versionPath.length);
  return [
    { href: `${req.baseUrl}/${m.projectId}/messages/${m.id}`, rel: 'self' },
    { href: `${root}/${m.projectId}/messages/${m.id}`, rel: 'bookmark' },
  ];
}

/** Cinder's user_message: "<action>:<detail>" (no space, as _build_user_message). */
export function cinderUserMessage(m: Pick<UserMessage, 'actionId' | 'detailId' | 'text'>): string {
  return m.text ?? `${CINDER_ACTIONS[m.actionId] ?? 'unknown action'}:${CINDER_DETAILS[m.detailId] ?? CINDER_DETAILS['001']}`;
}

/** Manila's user_message: "<action>: <detail>"; a migration's carries its reason. */
export function manilaUserMessage(m: Pick<UserMessage, 'actionId' | 'detailId' | 'text'>): string {
  const head = `${MANILA_ACTIONS[m.actionId] ?? 'unknown action'}: ${MANILA_DETAILS[m.detailId] ?? MANILA_DETAILS['001']}`;
  return m.text ? `${head} ${m.text}` : head;
}

function cinderView(req: ApiRequest, m: UserMessage): Record<string, unknown> {
  return {
    id: m.id,
    event_id: `VOLUME_${m.resourceType}_${m.actionId}_${m.detailId}`,
    user_message: cinderUserMessage(m),
    message_level: m.level,
    created_at: upstreamTime(m.createdAt),
    guaranteed_until: expiry(m),
    request_id: m.requestId,
    links: links(req, '/v3', m),
    resource_type: m.resourceType,
    resource_uuid: m.resourceId,
  };
}

function manilaView(req: ApiRequest, m: UserMessage): Record<string, unknown> {
  return {
    id: m.id,
    project_id: m.projectId,
    action_id: m.actionId,
    detail_id: m.detailId,
    message_level: m.level,
    created_at: upstreamTime(m.createdAt),
    expires_at: expiry(m),
    request_id: m.requestId,
    links: links(req, '/v2', m),
    resource_type: m.resourceType,
    resource_id: m.resourceId,
    user_message: manilaUserMessage(m),
  };
}

/** Query filters each service accepts on a list, mapped to the message's fields. */
const CINDER_FILTERS: Record<string, (m: UserMessage) => string | null> = {
  resource_uuid: (m) => m.resourceId,
  resource_type: (m) => m.resourceType,
  event_id: (m) => `VOLUME_${m.resourceType}_${m.actionId}_${m.detailId}`,
  message_level: (m) => m.level,
  request_id: (m) => m.requestId,
};
const MANILA_FILTERS: Record<string, (m: UserMessage) => string | null> = {
  resource_id: (m) => m.resourceId,
  resource_type: (m) => m.resourceType,
  action_id: (m) => m.actionId,
  detail_id: (m) => m.detailId,
  message_level: (m) => m.level,
  request_id: (m) => m.requestId,
  project_id: (m) => m.projectId,
};

async function scoped(req: ApiRequest, table: TableKey): Promise<UserMessage> {
  const id = req.params.message_id!;
  const m = await getMessage(table, id);
  if (!m || (!req.auth.isAdmin && m.projectId !== req.auth.projectId)) throw new NotFound(`Message ${id} could not be found.`);
  return m;
}

function messageRoutes(opts: {
  table: TableKey;
  minVersion: string;
  view: (req: ApiRequest, m: UserMessage) => Record<string, unknown>;
  filters: Record<string, (m: UserMessage) => string | null>;
  newestFirst: boolean;
  deleteStatus: number;
}): RouteSpec[] {
  return [
    {
      method: 'GET',
      path: '/messages',
      action: MESSAGE_POLICIES.getAll,
      minVersion: opts.minVersion,
      handler: async (req) => {
        // An admin sees every project's (upstream's project_only query), others their own.
        let all = await listMessages(opts.table, req.auth.isAdmin ? undefined : req.auth.projectId);
        for (const [k, field] of Object.entries(opts.filters)) {
          const want = req.query.get(k);
          if (want !== null) all = all.filter((m) => field(m) === want);
        }
        if (opts.newestFirst) all.reverse();
        return json(200, { messages: all.map((m) => opts.view(req, m)) });
      },
    },
    {
      method: 'GET',
      path: '/messages/{message_id}',
      action: MESSAGE_POLICIES.get,
      authorizeBy: 'resource',
      minVersion: opts.minVersion,
      handler: async (req) => {
        const m = await scoped(req, opts.table);
        authorize(req.auth, MESSAGE_POLICIES.get, { projectId: m.projectId });
        return json(200, { message: opts.view(req, m) });
      },
    },
    {
      method: 'DELETE',
      path: '/messages/{message_id}',
      action: MESSAGE_POLICIES.delete,
      authorizeBy: 'resource',
      minVersion: opts.minVersion,
      handler: async (req) => {
        const m = await scoped(req, opts.table);
        authorize(req.auth, MESSAGE_POLICIES.delete, { projectId: m.projectId });
        await deleteMessage(opts.table, m.id);
        return json(opts.deleteStatus);
      },
    },
  ];
}

/** Cinder: oldest first (its default sort created_at asc); delete answers 204. */
export const cinderMessageRoutes = messageRoutes({ table: 'volume', minVersion: '3.3', view: cinderView, filters: CINDER_FILTERS, newestFirst: false, deleteStatus: 204 });
/** Manila: newest first (sort_dir desc by default); delete answers 204. */
export const manilaMessageRoutes = messageRoutes({ table: 'share', minVersion: '2.37', view: manilaView, filters: MANILA_FILTERS, newestFirst: true, deleteStatus: 204 });

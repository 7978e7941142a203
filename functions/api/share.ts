/**
 * The Manila v2 REST API (share-api in functions/wiring.ts): version discovery, shares, share
 * types, share networks, access rules, export locations, share instances, services and scheduler
 * pools, and the share migration actions (functions/migration). Echoes `X-OpenStack-Manila-API-Experimental: True` when the request was experimental
 * (reference §1.1); the version and `Vary` echoes come from createApiHandler.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { createApiHandler } from '../core/api.js';
import { SHARE_VERSIONS } from '../core/microversion.js';
// Registers the migration actions (migration_start, ..., reset_task_state) of POST /shares/{id}/action.
import '../migration/api.js';
import { accessRoutes } from '../shares/access.js';
import { shareNetworkRoutes } from '../shares/networks.js';
import { isExperimental } from '../shares/actions.js';
import { shareRoutes } from '../shares/routes.js';
import { shareTypeRoutes } from '../shares/types.js';
import { shareQuotaRoutes } from '../shares/quotas.js';
import { manilaMessageRoutes } from '../messages/routes.js';
import { versionRoutes, type VersionInfo } from './versions.js';

export const SHARE_VERSION_INFO: VersionInfo = {
  service: SHARE_VERSIONS,
  id: 'v2.0',
  versionPath: '/v2',
  updated: '2022-09-28T00:00:00Z',
  mediaType: 'application/vnd.openstack.share+json;version=1',
};

const inner = createApiHandler({
  service: SHARE_VERSIONS,
  rootPath: '/share',
  versionPath: '/v2',
  routes: [...shareRoutes, ...shareTypeRoutes, ...shareNetworkRoutes, ...accessRoutes, ...shareQuotaRoutes, ...manilaMessageRoutes],
  unversioned: versionRoutes(SHARE_VERSION_INFO),
});

export async function handler(event: APIGatewayProxyEventV2, context: Context): Promise<APIGatewayProxyStructuredResultV2> {
  const experimental = isExperimental(Object.fromEntries(Object.entries(event.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])));
  const res = (await inner(event, context)) as APIGatewayProxyStructuredResultV2;
  if (experimental && res.headers?.['X-OpenStack-Manila-API-Version']) res.headers = { ...res.headers, 'X-OpenStack-Manila-API-Experimental': 'True' };
  return res;
}

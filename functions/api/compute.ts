/**
 * The Nova v2.1 REST API (compute-api in functions/wiring.ts), at `/compute/v2.1` with and
 * without the project id: version discovery as novaclient reads it, the foundation routes (flavors,
 * os-services, os-hypervisors, os-availability-zone: functions/compute/routes.ts) and the servers
 * routes (functions/servers/routes.ts), composed here. Microversions 2.1–2.93
 * come from `OpenStack-API-Version: compute X.Y` or the legacy `X-OpenStack-Nova-API-Version`;
 * createApiHandler negotiates them and echoes both headers with `Vary`.
 *
 * Two Nova particulars on top of the shared handler (nova/api/openstack/wsgi.py):
 * - Nova's fault names map 406 to none of its named faults, so a version outside the range is
 *   `{"computeFault": {"code": 406, ...}}`;
 * - every response, errors included, carries `x-compute-request-id` beside
 *   `x-openstack-request-id` (novaclient reads either).
 *
 * As an entry point it fills the ports lower layers declare: the compute foundation's
 * ComputeHostRestart (an os-services update that brings a host back cleans up evacuated guests)
 * and the attachments' AttachmentUsers (Cinder asking Nova whether a server uses an attachment).
 */
import { randomUUID } from 'node:crypto';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { createApiHandler, json, type RouteSpec, type UnversionedRoute } from '../core/api.js';
import { registerAttachmentUsers } from '../attachments/ports.js';
import { registerSnapshotsAsVolumeSources } from '../snapshots/sources.js';
import { registerImagesAsVolumeSources } from '../servers/volume-image-sources.js';
import { COMPUTE_VERSIONS } from '../core/microversion.js';
import { registerComputeHostRestart } from '../compute/ports.js';
import { FOUNDATION_ROUTES } from '../compute/routes.js';
import { versionDocument, versionsDocument } from '../compute/views.js';
import { cleanupEvacuatedGuests } from '../servers/flows/evacuate/host-restart.js';
import { SERVER_ATTACHMENT_USERS } from '../servers/attachment-users.js';
import { SERVER_ROUTES } from '../servers/routes.js';
import { LIMITS_ROUTES } from '../servers/limits-routes.js';

registerComputeHostRestart({ cleanupEvacuatedGuests });
registerAttachmentUsers(SERVER_ATTACHMENT_USERS);
// /os-volumes creates through the volume API, snapshot_id included (volumes/sources.ts port).
registerSnapshotsAsVolumeSources();
registerImagesAsVolumeSources();

/** Every route of the Nova API (the authorization checks enumerate it). */
export const routes: RouteSpec[] = [...FOUNDATION_ROUTES, ...SERVER_ROUTES, ...LIMITS_ROUTES];

export const COMPUTE_VERSION_ROUTES: UnversionedRoute[] = [
  // Nova answers its version list with 200 (not 300 like Cinder and Manila).
  { method: 'GET', path: '/', handler: async ({ rootUrl }) => json(200, versionsDocument(COMPUTE_VERSIONS, rootUrl)) },
  { method: 'GET', path: '/v2.1/', handler: async ({ rootUrl }) => json(200, versionDocument(COMPUTE_VERSIONS, rootUrl)) },
];

const inner = createApiHandler({
  service: COMPUTE_VERSIONS,
  rootPath: '/compute',
  versionPath: '/v2.1',
  routes,
  unversioned: COMPUTE_VERSION_ROUTES,
});

/** Rewrites a `notAcceptable` fault to Nova's `computeFault` (same code and message). */
export function novaFaultBody(body: string | undefined): string | undefined {
  if (!body) return body;
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>;
    if (parsed && typeof parsed === 'object' && 'notAcceptable' in parsed && Object.keys(parsed).length === 1) {
      return JSON.stringify({ computeFault: parsed.notAcceptable });
    }
  } catch {
    // Not JSON (the shared handler's bodies always are): nothing to rewrite, the body goes out as it is.
  }
  return body;
}

export async function handler(event: APIGatewayProxyEventV2, context: Context): Promise<APIGatewayProxyStructuredResultV2> {
  const res = (await inner(event, context)) as APIGatewayProxyStructuredResultV2;
  const headers = { ...(res.headers ?? {}) } as Record<string, string>;
  // Error responses of the shared handler carry no request id; Nova's always do.
  const requestId = headers['x-openstack-request-id'] ?? `req-${randomUUID()}`;
  headers['x-openstack-request-id'] = requestId;
  headers['x-compute-request-id'] = requestId;
  const body = res.statusCode === 406 ? novaFaultBody(res.body) : res.body;
  return { ...res, headers, body };
}

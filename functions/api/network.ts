/**
 * The Neutron v2.0 REST API (network-api in functions/wiring.ts) at `/network`: version discovery,
 * networks, subnets, ports (functions/networks/routes.ts). Neutron's error body is
 * `{"NeutronError": {"type", "message", "detail"}}`.
 */
import type { PlainResponse } from '../core/plain-api.js';
import { createPlainApiHandler } from '../core/plain-api.js';
import type { FerryError } from '../core/errors.js';
import { NETWORK_ROUTES, NeutronError } from '../networks/routes.js';
import { NETWORK_QUOTA_ROUTES } from '../networks/quotas.js';

/** Neutron's fault types for errors that are not its own. */
const TYPES: Record<number, string> = { 400: 'HTTPBadRequest', 401: 'HTTPUnauthorized', 403: 'HTTPForbidden', 404: 'HTTPNotFound', 405: 'HTTPMethodNotAllowed', 409: 'HTTPConflict' };

export function neutronError(e: FerryError): PlainResponse {
  const type = e instanceof NeutronError ? e.neutronType : e.status === 403 ? 'PolicyNotAuthorized' : (TYPES[e.status] ?? 'HTTPInternalServerError');
  return { status: e.status, body: { NeutronError: { type, message: e.message, detail: '' } } };
}

export const routes = [...NETWORK_ROUTES, ...NETWORK_QUOTA_ROUTES];

export const handler = createPlainApiHandler({
  rootPath: '/network',
  routes,
  errorResponse: neutronError,
  methodNotAllowed: () => new NeutronError(405, 'HTTPMethodNotAllowed', 'The method is not allowed for this resource.'),
});

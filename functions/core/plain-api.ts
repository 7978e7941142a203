/**
 * The handler of an API without microversions and with its own error bodies (Glance v2, Neutron
 * v2.0), where functions/core/api.ts's shape does not fit: request bodies that are not JSON
 * (an image upload is raw bytes, a Glance PATCH is `application/openstack-images-v2.1-json-patch`),
 * responses that are not JSON (an image download), and fault bodies that are not Nova's
 * `{"<fault>": {...}}`. Routing, the caller's identity and the policy check are the same as there.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { randomUUID } from 'node:crypto';
import { authFromEvent, type AuthContext } from './auth.js';
import { BadRequest, FerryError, NotFound } from './errors.js';
import { logger } from './logger.js';
import { authorize } from './policy.js';

export type PlainMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD';

export interface PlainRequest {
  event: APIGatewayProxyEventV2;
  auth: AuthContext;
  params: Record<string, string>;
  query: URLSearchParams;
  /** The raw body bytes (base64 undone), empty when there is none. */
  raw: Buffer;
  /** Lower-cased media type of the body, without parameters ('' when absent). */
  contentType: string;
  /** `http://host/image` (the API's root as the caller sees it). */
  rootUrl: string;
  requestId: string;
}

export interface PlainResponse {
  status: number;
  /** A JSON value, or bytes sent as they are (base64 through API Gateway). */
  body?: unknown;
  bytes?: Buffer;
  headers?: Record<string, string>;
}

export interface PlainRoute {
  method: PlainMethod;
  /** Relative to the root, `{name}` segments are parameters: `/v2/images/{image_id}`. */
  path: string;
  /** The policy action checked before the handler (no target); undefined: public (version discovery). */
  action?: string;
  handler: (req: PlainRequest) => Promise<PlainResponse>;
}

export interface PlainApi {
  /** `/image`. */
  rootPath: string;
  routes: PlainRoute[];
  /** The error response for a FerryError (status, body, headers) in the API's own shape. */
  errorResponse: (e: FerryError, event: APIGatewayProxyEventV2) => PlainResponse;
  /** What a path that no route knows answers (a method no route of the path takes: 405 as upstream). */
  methodNotAllowed: (method: string) => FerryError;
}

/** Parses the body as JSON. @throws BadRequest on malformed JSON. */
export function jsonBody(req: PlainRequest): unknown {
  if (req.raw.length === 0) return undefined;
  try {
    return JSON.parse(req.raw.toString('utf8'));
  } catch {
    throw new BadRequest('Malformed request body');
  }
}

function match(pattern: string, path: string): Record<string, string> | undefined {
  const p = pattern.split('/');
  const s = path.split('/');
  if (p.length !== s.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    const seg = p[i]!;
    if (seg.startsWith('{') && seg.endsWith('}')) {
      if (!s[i]) return undefined;
      try {
        params[seg.slice(1, -1)] = decodeURIComponent(s[i]!);
      } catch {
        return undefined;
      }
    } else if (seg !== s[i]) return undefined;
  }
  return params;
}

function toResult(res: PlainResponse, requestId: string): APIGatewayProxyStructuredResultV2 {
  const headers: Record<string, string> = { 'x-openstack-request-id': requestId, ...(res.headers ?? {}) };
  if (res.bytes) {
    headers['Content-Type'] ??= 'application/octet-stream';
    return { statusCode: res.status, headers, body: res.bytes.toString('base64'), isBase64Encoded: true };
  }
  if (res.body === undefined) return { statusCode: res.status, headers, body: '' };
  if (typeof res.body === 'string') return { statusCode: res.status, headers: { 'Content-Type': 'text/plain; charset=UTF-8', ...headers }, body: res.body };
  return { statusCode: res.status, headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(res.body) };
}

/** Builds the Lambda handler of one plain API. */
export function createPlainApiHandler(api: PlainApi) {
  return async (event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> => {
    const requestId = `req-${randomUUID()}`;
    try {
      let path = event.requestContext.http.path.slice(api.rootPath.length);
      if (path.endsWith('/')) path = path.slice(0, -1);
      const method = event.requestContext.http.method.toUpperCase();
      const candidates = api.routes.map((r) => ({ r, params: match(r.path === '/' ? '' : r.path, path) })).filter((c) => c.params);
      if (candidates.length === 0) throw new NotFound('The resource could not be found.');
      const found = candidates.find((c) => c.r.method === method || (method === 'HEAD' && c.r.method === 'GET'));
      if (!found) throw api.methodNotAllowed(method);
      const raw = event.body ? Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8') : Buffer.alloc(0);
      const proto = event.headers['x-forwarded-proto'] ?? 'http';
      const host = event.headers['host'] ?? event.requestContext.domainName ?? 'localhost';
      const public_ = found.r.action === undefined;
      const auth = public_ ? { userId: '', projectId: '', isAdmin: false, roles: [] } : authFromEvent(event);
      if (!public_) authorize(auth, found.r.action!);
      const req: PlainRequest = {
        event,
        auth,
        params: found.params!,
        query: new URLSearchParams(event.rawQueryString ?? ''),
        raw,
        contentType: (event.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase(),
        rootUrl: `${proto}://${host}${api.rootPath}`,
        requestId,
      };
      return toResult(await found.r.handler(req), requestId);
    } catch (e) {
      if (e instanceof FerryError) {
        if (e.status >= 500) logger.error('request failed', { error: e });
        return toResult(api.errorResponse(e, event), requestId);
      }
      logger.error('unhandled error', { error: e as Error });
      return toResult(api.errorResponse(new FerryError(500, 'computeFault', 'The server has either erred or is incapable of performing the requested operation.'), event), requestId);
    }
  };
}

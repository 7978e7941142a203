/**
 * The Keystone v3 REST API (identity-api in functions/wiring.ts): version discovery, tokens
 * (issue, validate, check, revoke), the caller's catalog and projects, and the resources of
 * functions/identity/routes.ts.
 *
 * It checks tokens itself instead of behind the HTTP API's authorizer, as Keystone does: issuing a
 * token needs none, validating one distinguishes the caller's token (401 when bad) from the subject
 * token (404 when unknown or expired), and every refusal carries Keystone's own body
 * (`{"error": {"code", "message", "title"}}`), which an authorizer's denial could not.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { randomUUID } from 'node:crypto';
import { createIdentityToken, isExpired, readToken, revokeToken, type TokenRecord } from '../auth/tokens.js';
import { parseNoAuthToken } from '../core/auth.js';
import { FerryError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authenticate } from '../identity/authenticate.js';
import { badRequest, catalog, forbidden, IdentityError, notFound, projectView, tokenBody, unauthorized, versionDoc } from '../identity/model.js';
import { enforce, type Caller } from '../identity/policy.js';
import { projectsOf, resourceRoute, type IdentityRequest, type IdentityResponse } from '../identity/routes.js';

const ROOT = '/identity';

function baseUrlOf(event: APIGatewayProxyEventV2): string {
  const proto = event.headers['x-forwarded-proto'] ?? 'http';
  const host = event.headers['host'] ?? event.requestContext.domainName ?? 'localhost';
  return `${proto}://${host}`;
}

function parseBody(event: APIGatewayProxyEventV2): unknown {
  if (event.body === undefined || event.body === null || event.body === '') return undefined;
  const text = event.isBase64Encoded ? Buffer.from(event.body, 'base64').toString('utf8') : event.body;
  try {
    return JSON.parse(text);
  } catch {
    throw badRequest('Malformed request body: the request body is not valid JSON.');
  }
}

const header = (event: APIGatewayProxyEventV2, name: string) =>
  Object.entries(event.headers ?? {}).find(([k]) => k.toLowerCase() === name)?.[1] || undefined;

/** The caller the X-Auth-Token stands for: a Keystone or `ferry token create` token, or locally a noauth `user:project`. */
async function callerOf(token: string | undefined): Promise<Caller> {
  if (!token) throw unauthorized();
  if (process.env.FERRY_AUTH_MODE === 'noauth' && token.includes(':')) {
    const ctx = parseNoAuthToken(token);
    if (!ctx) throw unauthorized();
    return { userId: ctx.userId, projectId: ctx.projectId, roles: ctx.roles.split(',').filter(Boolean) };
  }
  const record = await readToken(token);
  if (!record || isExpired(record)) throw unauthorized('The request you have made requires authentication.');
  return { userId: record.userId, ...(record.projectId ? { projectId: record.projectId } : {}), roles: record.roles.split(',').filter(Boolean) };
}

async function subjectOf(event: APIGatewayProxyEventV2): Promise<{ token: string; record: TokenRecord & Required<Pick<TokenRecord, 'identity'>> }> {
  const token = header(event, 'x-subject-token');
  if (!token) throw new IdentityError(400, 'Bad Request', 'X-Subject-Token header is required.');
  const record = await readToken(token);
  if (!record?.identity || isExpired(record)) throw notFound('token', token.slice(0, 8) + '…');
  return { token, record: record as TokenRecord & Required<Pick<TokenRecord, 'identity'>> };
}

async function tokens(req: IdentityRequest, event: APIGatewayProxyEventV2): Promise<IdentityResponse> {
  const withCatalog = !req.query.has('nocatalog');
  if (req.method === 'POST') {
    const subject = await authenticate(req.body);
    const token = await createIdentityToken(subject);
    return { status: 201, body: tokenBody(subject, withCatalog ? { baseUrl: req.baseUrl } : {}), headers: { 'X-Subject-Token': token } };
  }
  const caller = await req.caller();
  const { token, record } = await subjectOf(event);
  const action = { GET: 'identity:validate_token', HEAD: 'identity:check_token', DELETE: 'identity:revoke_token' }[req.method];
  if (!action) throw notFound('resource', 'the requested path');
  enforce(caller, action, { userId: record.userId });
  if (req.method === 'DELETE') {
    if (!(await revokeToken(token))) throw notFound('token', token.slice(0, 8) + '…');
    return { status: 204 };
  }
  if (req.method === 'HEAD') return { status: 200, headers: { 'X-Subject-Token': token } };
  return { status: 200, body: tokenBody(record.identity, withCatalog ? { baseUrl: req.baseUrl } : {}), headers: { 'X-Subject-Token': token } };
}

async function route(req: IdentityRequest, event: APIGatewayProxyEventV2): Promise<IdentityResponse> {
  const { parts, method, baseUrl } = req;
  if (parts[0] === 'auth' && parts[1] === 'tokens' && parts.length === 2) return tokens(req, event);
  if (parts[0] === 'auth' && parts.length === 2 && method === 'GET' && (parts[1] === 'catalog' || parts[1] === 'projects')) {
    const caller = await req.caller();
    if (parts[1] === 'projects') {
      const projects = await projectsOf(caller.userId);
      return { status: 200, body: { projects: projects.map((p) => projectView(p, baseUrl)), links: { self: `${baseUrl}${ROOT}/v3/auth/projects`, previous: null, next: null } } };
    }
    // Keystone refuses the catalog to an unscoped token.
    if (!caller.projectId) throw forbidden('identity:get_auth_catalog');
    return { status: 200, body: { catalog: catalog(baseUrl), links: { self: `${baseUrl}${ROOT}/v3/auth/catalog`, previous: null, next: null } } };
  }
  const answered = await resourceRoute(req);
  if (answered) return answered;
  throw notFound('resource', 'the requested path');
}

/** A path segment decoded; one no id or name could be (malformed, or over Keystone's 255 characters) finds nothing. */
function safeDecode(part: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(part);
  } catch {
    throw notFound('resource', 'the requested path');
  }
  if (decoded.length > 255) throw notFound('resource', 'the requested path');
  return decoded;
}

function toResult(res: IdentityResponse, requestId: string, isHead: boolean): APIGatewayProxyStructuredResultV2 {
  const headers: Record<string, string> = { 'x-openstack-request-id': requestId, ...(res.headers ?? {}) };
  if (res.body === undefined || isHead) return { statusCode: res.status, headers, body: '' };
  return { statusCode: res.status, headers: { ...headers, 'Content-Type': 'application/json' }, body: JSON.stringify(res.body) };
}

export async function handler(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> {
  const requestId = `req-${randomUUID()}`;
  const method = event.requestContext.http.method.toUpperCase();
  const isHead = method === 'HEAD';
  try {
    const baseUrl = baseUrlOf(event);
    let path = event.requestContext.http.path;
    while (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
    if (path === ROOT && (method === 'GET' || isHead)) return toResult({ status: 300, body: { versions: { values: [versionDoc(baseUrl)] } } }, requestId, isHead);
    if (path === `${ROOT}/v3` && (method === 'GET' || isHead)) return toResult({ status: 200, body: { version: versionDoc(baseUrl) } }, requestId, isHead);
    if (!path.startsWith(`${ROOT}/v3/`)) throw notFound('version', path);
    const token = header(event, 'x-auth-token');
    let caller: Promise<Caller> | undefined;
    const req: IdentityRequest = {
      method,
      parts: path.slice(`${ROOT}/v3/`.length).split('/').map(safeDecode),
      query: new URLSearchParams(event.rawQueryString ?? ''),
      body: parseBody(event),
      baseUrl,
      caller: () => (caller ??= callerOf(token)),
    };
    return toResult(await route(req, event), requestId, isHead);
  } catch (e) {
    if (e instanceof IdentityError) return toResult({ status: e.status, body: e.body() }, requestId, isHead);
    if (e instanceof FerryError && e.status < 500) return toResult({ status: e.status, body: new IdentityError(e.status, e.fault, e.message).body() }, requestId, isHead);
    logger.error('identity request failed', { error: e as Error });
    const err = new IdentityError(500, 'Internal Server Error', 'An unexpected error prevented the server from fulfilling your request.');
    return toResult({ status: 500, body: err.body() }, requestId, isHead);
  }
}

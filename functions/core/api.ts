/**
 * The shape every REST API handler (Cinder, Manila, Nova) takes: a middy handler with one
 * middleware, onError (the last point below); the rest happens in order in the handler (the path
 * normalized, then @middy/http-router picks the route, whose wrapper negotiates the version,
 * checks the project and the policy, and parses the request).
 *
 * - Paths are accepted with and without the project id (`/volume/v3/{project}/volumes` and
 *   `/volume/v3/volumes`), as upstream does from 3.67 / 2.60; the project segment is stripped
 *   before routing and checked against the caller.
 * - The microversion is negotiated once per request; a route whose minimum version is above the
 *   request's answers 404, as upstream does.
 * - Every FerryError becomes the upstream fault body `{"<fault>": {"code", "message"}}`; anything
 *   else is logged and answered 500 without internals.
 */
import middy from '@middy/core';
import httpRouterHandler from '@middy/http-router';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { randomUUID } from 'node:crypto';
import { authFromEvent, type AuthContext } from './auth.js';
import { BadRequest, FerryError, NotFound } from './errors.js';
import { logger } from './logger.js';
import { ApiVersion, negotiateVersion, versionHeaders, type ServiceVersions } from './microversion.js';
import type { StateMachineName } from './machines.js';
import { authorize } from './policy.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH' | 'HEAD';

export interface ApiRequest {
  event: APIGatewayProxyEventV2;
  auth: AuthContext;
  version: ApiVersion;
  /** Path parameters of the matched route. */
  params: Record<string, string>;
  /** Query string, multi-valued. */
  query: URLSearchParams;
  /** Parsed JSON body, or undefined when there is none. */
  body: unknown;
  /** The project id given in the URL, if any (already checked against the caller). */
  urlProjectId?: string;
  /** Base URL of this service as the caller sees it, for links (`http://host/volume/v3`). */
  baseUrl: string;
  requestId: string;
  /**
   * Set when no HTTP request is behind this one: a state machine started from the console runs
   * the API action it stands for as its first step (functions/servers/console-start.ts). The
   * action then records its operation under that execution and starts no machine (it runs).
   */
  startedAs?: StartedAs;
}

/** The execution whose first step runs an API action (a console start of its state machine). */
export interface StartedAs {
  machine: StateMachineName;
  /** `$$.Execution.Name`: the operation is recorded under it, as the API records the name it starts. */
  executionName: string;
}

export interface ApiResponse {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface RouteSpec {
  method: Method;
  /** Relative to the service's versioned base, e.g. `/volumes/{volume_id}`. */
  path: string;
  /** The policy action. Checked here when `target` is 'none'; otherwise the handler checks it against the resource. */
  action: string;
  /** 'none': authorize before the handler with no target; 'resource': the handler calls authorize itself with the target. */
  authorizeBy?: 'none' | 'resource';
  minVersion?: string;
  maxVersion?: string;
  handler: (req: ApiRequest) => Promise<ApiResponse>;
}

export interface UnversionedRoute {
  method: Method;
  /** Relative to the service root, e.g. `/` or `/v3/`. */
  path: string;
  /** `rawPath`: the path as the client sent it (with its trailing slash, which routing drops). */
  handler: (req: { event: APIGatewayProxyEventV2; rootUrl: string; rawPath: string }) => Promise<ApiResponse>;
}

export interface ApiDefinition {
  service: ServiceVersions;
  /** e.g. `/volume` — what the HTTP API routes to this handler. */
  rootPath: string;
  /** e.g. `/v3` — the versioned base under the root. */
  versionPath: string;
  routes: RouteSpec[];
  /** Version discovery documents; no auth needed, as upstream. */
  unversioned: UnversionedRoute[];
}

export function json(status: number, body?: unknown, headers?: Record<string, string>): ApiResponse {
  return { status, body, headers };
}

export function faultBody(e: FerryError): Record<string, { code: number; message: string }> {
  return { [e.fault]: { code: e.status, message: e.message } };
}

function requestBaseUrl(event: APIGatewayProxyEventV2): string {
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
    throw new BadRequest('Malformed request body');
  }
}

function inRange(v: ApiVersion, min?: string, max?: string): boolean {
  if (min && !v.atLeast(min)) return false;
  if (max) {
    const [maj, mn] = max.split('.').map(Number);
    if (v.major > maj! || (v.major === maj && v.minor > mn!)) return false;
  }
  return true;
}

function toResult(res: ApiResponse, extraHeaders: Record<string, string>): APIGatewayProxyStructuredResultV2 {
  const headers: Record<string, string> = { ...extraHeaders, ...(res.headers ?? {}) };
  if (res.body === undefined) {
    return { statusCode: res.status, headers, body: '' };
  }
  headers['Content-Type'] = 'application/json';
  return { statusCode: res.status, headers, body: JSON.stringify(res.body) };
}

/** Builds the Lambda handler for one API. */
export function createApiHandler(def: ApiDefinition) {
  const versionedBase = def.rootPath + def.versionPath;
  const collections = new Set(def.routes.map((r) => r.path.split('/')[1]).filter(Boolean));

  // Group specs by method + path so several version ranges can share one router entry.
  const groups = new Map<string, RouteSpec[]>();
  for (const r of def.routes) {
    const key = `${r.method} ${r.path}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }

  type Ev = APIGatewayProxyEventV2 & { ferry: { urlProjectId?: string; requestId: string; rawPath: string } };

  const routerRoutes: { method: Method; path: string; handler: (event: Ev) => Promise<APIGatewayProxyStructuredResultV2> }[] = [];
  for (const [key, specs] of groups) {
    const [method, path] = key.split(' ') as [Method, string];
    routerRoutes.push({
      method,
      path: versionedBase + (path === '/' ? '' : path),
      handler: async (event: Ev) => {
        const version = negotiateVersion(event.headers, def.service);
        const vh = versionHeaders(version, def.service);
        try {
          const spec = specs.find((s) => inRange(version, s.minVersion, s.maxVersion));
          if (!spec) throw new NotFound();
          const auth = authFromEvent(event);
          if (event.ferry.urlProjectId && !auth.isAdmin && event.ferry.urlProjectId !== auth.projectId) {
            throw new BadRequest(
              `Malformed request URL: URL's project_id '${event.ferry.urlProjectId}' doesn't match Context's project_id '${auth.projectId}'`,
            );
          }
          if ((spec.authorizeBy ?? 'none') === 'none') authorize(auth, spec.action);
          const req: ApiRequest = {
            event,
            auth,
            version,
            params: Object.fromEntries(Object.entries(event.pathParameters ?? {}).map(([k, v]) => [k, decodeURIComponent(v ?? '')])),
            query: new URLSearchParams(event.rawQueryString ?? ''),
            body: parseBody(event),
            urlProjectId: event.ferry.urlProjectId,
            baseUrl: requestBaseUrl(event) + versionedBase,
            requestId: event.ferry.requestId,
          };
          return toResult(await spec.handler(req), vh);
        } catch (e) {
          (e as { versionHeaders?: Record<string, string> }).versionHeaders = vh;
          throw e;
        }
      },
    });
  }
  for (const u of def.unversioned) {
    routerRoutes.push({
      method: u.method,
      path: def.rootPath + (u.path === '/' ? '' : u.path.replace(/\/$/, '')),
      handler: async (event: Ev) => toResult(await u.handler({ event, rootUrl: requestBaseUrl(event) + def.rootPath, rawPath: event.ferry.rawPath }), {}),
    });
  }

  const router = httpRouterHandler({
    routes: routerRoutes as never,
    notFoundResponse: () => {
      throw new NotFound();
    },
  });

  const normalize = async (event: APIGatewayProxyEventV2, context: Context) => {
    const requestId = `req-${randomUUID()}`;
    const ev = event as Ev;
    const rawPath = ev.requestContext.http.path;
    let path = rawPath;
    if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
    let urlProjectId: string | undefined;
    if (path.startsWith(versionedBase + '/')) {
      const rest = path.slice(versionedBase.length + 1).split('/');
      // A lone segment (`/volume/v3/foo`) is no project: upstream routes nothing at
      // `/v3/{project_id}`, so it stays as it is and answers 404, not the version document.
      if (rest[0] && !collections.has(rest[0]) && rest.length > 1) {
        urlProjectId = rest[0];
        path = versionedBase + '/' + rest.slice(1).join('/');
      }
    }
    // Upstream's routers (Routes) match `/volumes` but not `/volumes/`: a trailing slash past the
    // version root is a 404 (Tempest's test_get_volume_without_passing_volume_id: show with an
    // empty id), while `/v3/` and the service root keep answering discovery.
    if (rawPath.endsWith('/') && path !== versionedBase && path !== def.rootPath && path !== '/') throw new NotFound();
    ev.ferry = { urlProjectId, requestId, rawPath };
    ev.requestContext = { ...ev.requestContext, http: { ...ev.requestContext.http, path } };
    const result = (await router(ev as never, context)) as APIGatewayProxyStructuredResultV2;
    result.headers = { ...(result.headers ?? {}), 'x-openstack-request-id': requestId };
    return result;
  };

  return middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2>()
    .use({
      onError: async (request) => {
        const e = request.error;
        const vh = (e as { versionHeaders?: Record<string, string> } | null)?.versionHeaders ?? {};
        if (e instanceof FerryError) {
          if (e.status >= 500) logger.error('request failed', { error: e });
          request.response = toResult({ status: e.status, body: faultBody(e) }, vh);
          return;
        }
        logger.error('unhandled error', { error: e as Error });
        request.response = toResult(
          { status: 500, body: { computeFault: { code: 500, message: 'The server has either erred or is incapable of performing the requested operation.' } } },
          vh,
        );
      },
    })
    .handler(normalize);
}

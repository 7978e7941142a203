/**
 * Builds the API Gateway HTTP API (payload 2.0) event a Lambda handler receives, with the
 * authorizer context filled in, for tests that call an API handler directly.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { randomUUID } from 'node:crypto';

export interface Caller {
  userId: string;
  projectId: string;
  admin?: boolean;
}

export const ADMIN: Caller = { userId: 'admin', projectId: 'admin', admin: true };
export const DEMO: Caller = { userId: 'demo', projectId: 'demo' };
export const OTHER: Caller = { userId: 'other', projectId: 'other' };

export function apiEvent(req: {
  method: string;
  path: string;
  query?: string;
  headers?: Record<string, string>;
  body?: unknown;
  caller?: Caller | null;
}): APIGatewayProxyEventV2 {
  const headers: Record<string, string> = { host: '127.0.0.1:8780', ...Object.fromEntries(Object.entries(req.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])) };
  const body = req.body === undefined ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body);
  if (body !== undefined) headers['content-type'] ??= 'application/json';
  const caller = req.caller === undefined ? ADMIN : req.caller;
  const now = new Date();
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: req.path,
    rawQueryString: req.query ?? '',
    headers,
    queryStringParameters: req.query ? Object.fromEntries(new URLSearchParams(req.query)) : undefined,
    requestContext: {
      accountId: 'local',
      apiId: 'local',
      domainName: headers.host!,
      domainPrefix: '127',
      http: { method: req.method, path: req.path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'test' },
      requestId: randomUUID(),
      routeKey: '$default',
      stage: '$default',
      time: now.toISOString(),
      timeEpoch: now.getTime(),
      ...(caller
        ? { authorizer: { lambda: { userId: caller.userId, projectId: caller.projectId, roles: caller.admin ? 'admin,member,reader' : 'member,reader' } } }
        : {}),
    },
    body,
    isBase64Encoded: false,
  } as APIGatewayProxyEventV2;
}

export const lambdaContext = { functionName: 'test', awsRequestId: 'test', getRemainingTimeInMillis: () => 29_000 } as unknown as Context;

type Handler = (event: APIGatewayProxyEventV2, context: Context) => Promise<APIGatewayProxyStructuredResultV2>;

/** Calls a handler and parses its JSON body. */
export async function call(handler: Handler, req: Parameters<typeof apiEvent>[0]): Promise<{ status: number; body: any; headers: Record<string, string> }> {
  const res = await handler(apiEvent(req), lambdaContext);
  const text = res.body ?? '';
  return { status: res.statusCode ?? 200, body: text ? JSON.parse(text) : undefined, headers: (res.headers ?? {}) as Record<string, string> };
}

/** The header cinderclient sends. */
export const cinder = (v = '3.70') => ({ 'OpenStack-API-Version': `volume ${v}` });

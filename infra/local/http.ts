/**
 * The local stack's one HTTP server, and how it runs a function the way Lambda does.
 *
 * Requests to an `api` function's `httpPrefix` become exactly the API Gateway HTTP API payload 2.0
 * event the Lambda gets on AWS, after the same Lambda authorizer has run (unless the request is a
 * GET of one of the function's `publicPaths`), and the handler's result is written back the way
 * API Gateway writes it. `/_aws/stepfunctions` is the local Step Functions endpoint
 * (stepfunctions.ts); `/healthz` says the stack answers.
 *
 * Before any of that, the front door holds every request to API Gateway's own limits (FRONT_DOOR_LIMITS:
 * payload size, request line and header size, time to send the request, idle keep-alive) and
 * refuses one over them with a real HTTP response (413, 431, 408), never a hang or a reset.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { FRONT_DOOR_LIMITS, PAYLOAD_TOO_LARGE_BODY, readBody, refusalBeforeBody, refuse, refuseClientErrors, refused, type FrontDoorLimits } from './front-door.js';
import { randomBytes, randomUUID } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { APIGatewayProxyEventV2, Context } from 'aws-lambda';
import type { FunctionWiring } from '../../functions/wiring.js';
import { bundledHandlerModule } from './handler-modules.js';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const LOCAL_ACCOUNT = '000000000000';
export const LOCAL_API_ID = 'local';
export const STEP_FUNCTIONS_PATH = '/_aws/stepfunctions';
/** Lambda's own default when a function sets no timeout. */
export const DEFAULT_FUNCTION_TIMEOUT_SECONDS = 3;
/** Lambda's own default when a function sets no memory size. */
export const DEFAULT_FUNCTION_MEMORY_MB = 128;

const NOT_FOUND_BODY = { itemNotFound: { code: 404, message: 'The resource could not be found.' } };
const UNAUTHORIZED_BODY = { unauthorized: { code: 401, message: 'Authentication required' } };
/** What API Gateway answers when the integration or the authorizer fails. */
const INTERNAL_ERROR_BODY = { message: 'Internal Server Error' };

export function localRegion(): string {
  return process.env.AWS_REGION ?? 'us-east-1';
}

/** The physical function name, as infra/aws names it. */
export function lambdaName(fn: Pick<FunctionWiring, 'name'>): string {
  return `ferry-${fn.name}`;
}

export function lambdaArn(fn: Pick<FunctionWiring, 'name'>): string {
  return `arn:aws:lambda:${localRegion()}:${LOCAL_ACCOUNT}:function:${lambdaName(fn)}`;
}

export type LambdaHandler = (event: unknown, context: Context) => unknown;

const handlerModules = new Map<string, Promise<LambdaHandler>>();

/** The function's handler, imported from its entry (relative to the repository root) on first use. */
export function loadHandler(fn: FunctionWiring): Promise<LambdaHandler> {
  const key = `${fn.entry}#${fn.export}`;
  let loaded = handlerModules.get(key);
  if (!loaded) {
    // From the start bundle, its own chunk of the module (handler-modules.ts); from TypeScript, the file.
    const load = bundledHandlerModule(fn.entry) ?? (() => import(pathToFileURL(resolve(REPO_ROOT, fn.entry)).href) as Promise<Record<string, unknown>>);
    loaded = load().then((mod) => {
      const handler = mod[fn.export];
      if (typeof handler !== 'function') throw new Error(`${fn.entry} exports no function '${fn.export}' (wiring entry '${fn.name}')`);
      return handler as LambdaHandler;
    });
    // A module that failed to load (mid-edit, missing) is tried again on the next call.
    loaded.catch(() => handlerModules.delete(key));
    handlerModules.set(key, loaded);
  }
  return loaded;
}

type ContainerFields = Pick<Context, 'functionName' | 'functionVersion' | 'invokedFunctionArn' | 'memoryLimitInMB' | 'logGroupName' | 'logStreamName'>;

/**
 * What stays the same over the invocations of one Lambda container, this process being one
 * container per function: its names and its log stream (Lambda names a stream once per
 * container, by the day it started). Made once, not on every request.
 */
const containers = new Map<string, ContainerFields>();

function containerOf(fn: FunctionWiring): ContainerFields {
  let fields = containers.get(fn.name);
  if (!fields) {
    const functionName = lambdaName(fn);
    const day = new Date().toISOString().slice(0, 10).replace(/-/g, '/');
    fields = {
      functionName,
      functionVersion: '$LATEST',
      invokedFunctionArn: lambdaArn(fn),
      memoryLimitInMB: String(fn.memoryMb ?? DEFAULT_FUNCTION_MEMORY_MB),
      logGroupName: `/aws/lambda/${functionName}`,
      logStreamName: `${day}/[$LATEST]${randomBytes(16).toString('hex')}`,
    };
    containers.set(fn.name, fields);
  }
  return fields;
}

/** A Lambda-like Context for one invocation of `fn`. */
export function lambdaContext(fn: FunctionWiring, awsRequestId: string = randomUUID()): Context {
  const deadline = Date.now() + (fn.timeoutSeconds ?? DEFAULT_FUNCTION_TIMEOUT_SECONDS) * 1000;
  return {
    callbackWaitsForEmptyEventLoop: true,
    ...containerOf(fn),
    awsRequestId,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}

/** Invokes `fn` in-process with a Lambda-like context; the result goes through JSON as Lambda's does. */
export async function invokeFunction(fn: FunctionWiring, event: unknown): Promise<unknown> {
  const handler = await loadHandler(fn);
  const result = await handler(event, lambdaContext(fn));
  return result === undefined ? null : JSON.parse(JSON.stringify(result));
}

/** The local Step Functions endpoint as the HTTP server sees it (stepfunctions.ts implements it). */
export interface StepFunctionsEndpoint {
  handle(target: string | undefined, body: string): Promise<{ status: number; body: unknown }>;
}

export interface HttpServerOptions {
  /** 0 = a free port chosen by the kernel. */
  port: number;
  /** The functions to route to (their `httpPrefix`), and the authorizer among them. */
  functions: readonly FunctionWiring[];
  stepFunctions?: StepFunctionsEndpoint;
  /** No request errors on stderr. */
  quiet?: boolean;
  /** Default FRONT_DOOR_LIMITS (API Gateway's); tests lower them so that a timeout takes a second, not 30. */
  limits?: Partial<FrontDoorLimits>;
}

export interface LocalHttpServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

export async function startHttpServer(options: HttpServerOptions): Promise<LocalHttpServer> {
  const apis = options.functions.filter((f) => f.kind === 'api' && f.httpPrefix);
  const authorizer = options.functions.find((f) => f.kind === 'authorizer');
  const logError = (what: string, e: unknown) => {
    if (!options.quiet) console.error(`ferry local: ${what}:`, e);
  };
  const limits: FrontDoorLimits = { ...FRONT_DOOR_LIMITS, ...options.limits };
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) throw new Error(`limits.headersTimeoutMs (${limits.headersTimeoutMs}) must not exceed limits.requestTimeoutMs (${limits.requestTimeoutMs})`);
  // Node looks for expired requests on a timer (30 s by default), so a request could live up to one
  // period past its timeout: check ten times per timeout (at most every second), and expire each
  // one period early, so that no client holds a connection past the limit.
  const checkEveryMs = Math.max(10, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 10)));
  /** The response of each connection's latest request: a refusal must not cut into one being written. */
  const responses = new WeakMap<Duplex, ServerResponse>();

  const server = createServer(
    {
      maxHeaderSize: 2 * limits.maxHeaderBytes,
      requestTimeout: Math.max(1, limits.requestTimeoutMs - checkEveryMs),
      headersTimeout: Math.max(1, limits.headersTimeoutMs - checkEveryMs),
      connectionsCheckingInterval: checkEveryMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
    },
    onRequest,
  );

  function onRequest(req: IncomingMessage, res: ServerResponse): void {
    // A request pipelined behind a refused one: the connection is closing, nothing more is answered.
    if (refused.has(req.socket)) {
      req.resume();
      return;
    }
    responses.set(req.socket, res);
    handle(req, res).catch((e) => {
      // Refused (408) or gone while its body was arriving: there is no one left to answer.
      if (refused.has(req.socket) || (e as { code?: string }).code === 'ECONNRESET') return;
      logError(`${req.method} ${req.url} failed`, e);
      if (!res.headersSent) send(res, 500, INTERNAL_ERROR_BODY);
      else res.destroy();
    });
  }

  // `Expect: 100-continue`: a body the front door would refuse is refused before the client sends it.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (!refusalBeforeBody(req, limits)) res.writeContinue();
    onRequest(req, res);
  });

  refuseClientErrors(server, limits, responses);

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const early = refusalBeforeBody(req, limits);
    if (early) {
      // The body (if any) is read and thrown away while the refusal lingers.
      req.resume();
      return refuse(req.socket, early.status, early.body, limits.lingerMs);
    }
    const body = await readBody(req, limits.maxBodyBytes);
    if (body === undefined) return refuse(req.socket, 413, PAYLOAD_TOO_LARGE_BODY, limits.lingerMs);
    // Answered 408 while its body was arriving: the client has its answer; nothing runs.
    if (refused.has(req.socket)) return;
    const target = req.url ?? '/';
    const q = target.indexOf('?');
    const rawPath = q < 0 ? target : target.slice(0, q);
    const rawQueryString = q < 0 ? '' : target.slice(q + 1);

    if (rawPath === '/healthz') return send(res, 200, { status: 'ok' });

    if (rawPath === STEP_FUNCTIONS_PATH || rawPath === STEP_FUNCTIONS_PATH + '/') {
      if (!options.stepFunctions || req.method !== 'POST') return send(res, 404, NOT_FOUND_BODY);
      const header = req.headers['x-amz-target'];
      const out = await options.stepFunctions.handle(Array.isArray(header) ? header[0] : header, body.toString('utf8'));
      res.writeHead(out.status, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': randomUUID() });
      res.end(JSON.stringify(out.body));
      return;
    }

    const fn = apis.find((f) => rawPath === f.httpPrefix || rawPath.startsWith(f.httpPrefix + '/'));
    if (!fn) return send(res, 404, NOT_FOUND_BODY);

    const event = apiGatewayEvent(req, fn, { rawPath, rawQueryString, body });
    const method = req.method ?? 'GET';
    const isPublic = fn.authenticatesItself || (method === 'GET' && (fn.publicPaths ?? []).some((p) => withoutTrailingSlash(p) === withoutTrailingSlash(rawPath)));
    if (!isPublic) {
      if (!authorizer) throw new Error(`no authorizer function among the local stack's functions, needed for ${method} ${rawPath}`);
      let verdict: { isAuthorized?: boolean; context?: Record<string, unknown> } | null;
      try {
        verdict = (await invokeFunction(authorizer, authorizerEvent(event))) as typeof verdict;
      } catch (e) {
        logError('authorizer failed', e);
        return send(res, 500, INTERNAL_ERROR_BODY);
      }
      if (!verdict?.isAuthorized) return send(res, 401, UNAUTHORIZED_BODY);
      (event.requestContext as unknown as Record<string, unknown>).authorizer = { lambda: verdict.context ?? {} };
    }

    let result: unknown;
    try {
      result = await invokeFunction(fn, event);
    } catch (e) {
      logError(`${lambdaName(fn)} failed on ${method} ${rawPath}`, e);
      return send(res, 500, INTERNAL_ERROR_BODY);
    }
    writeResult(res, result, method === 'HEAD');
  }

  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(options.port, '127.0.0.1', () => resolveListen());
  });
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolveClose) => {
        server.close(() => resolveClose());
        // Keep-alive sockets of SDK clients would hold close() open until they time out.
        server.closeAllConnections();
      }),
  };
}

function withoutTrailingSlash(p: string): string {
  return p.length > 1 && p.endsWith('/') ? p.slice(0, -1) : p;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Content types API Gateway passes as text; anything else arrives base64-encoded. */
function isTextContentType(contentType: string | undefined): boolean {
  if (!contentType) return true;
  const type = contentType.split(';')[0]!.trim().toLowerCase();
  return (
    type.startsWith('text/') ||
    /^application\/([\w.-]+\+)?(json|xml)$/.test(type) ||
    type === 'application/javascript' ||
    type === 'application/x-www-form-urlencoded'
  );
}

/** `12/Mar/2020:19:03:58 +0000`, the requestContext.time format. */
function clfTime(d: Date): string {
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(d.getUTCDate())}/${months[d.getUTCMonth()]}/${d.getUTCFullYear()}:${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000`;
}

/** The API Gateway HTTP API payload 2.0 event for `req`, routed to `fn` (no authorizer context yet). */
export function apiGatewayEvent(
  req: IncomingMessage,
  fn: FunctionWiring,
  parts: { rawPath: string; rawQueryString: string; body: Buffer },
): APIGatewayProxyEventV2 {
  const prefix = fn.httpPrefix!;
  const headers: Record<string, string> = {};
  for (const [name, values] of Object.entries(req.headersDistinct)) {
    // API Gateway hands cookies over in `cookies`, not among the headers.
    if (name === 'cookie' || !values) continue;
    headers[name] = values.join(',');
  }
  const cookies = (req.headersDistinct.cookie ?? []).flatMap((c) => c.split(';')).map((c) => c.trim()).filter(Boolean);

  const queryStringParameters: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(parts.rawQueryString)) {
    queryStringParameters[k] = k in queryStringParameters ? `${queryStringParameters[k]},${v}` : v;
  }

  const atPrefix = parts.rawPath === prefix;
  const routeKey = atPrefix ? `ANY ${prefix}` : `ANY ${prefix}/{proxy+}`;
  const now = new Date();
  const domainName = headers.host ?? '127.0.0.1';
  const isText = isTextContentType(headers['content-type']);
  const event: APIGatewayProxyEventV2 = {
    version: '2.0',
    routeKey,
    rawPath: parts.rawPath,
    rawQueryString: parts.rawQueryString,
    ...(cookies.length ? { cookies } : {}),
    headers,
    ...(Object.keys(queryStringParameters).length ? { queryStringParameters } : {}),
    requestContext: {
      accountId: LOCAL_ACCOUNT,
      apiId: LOCAL_API_ID,
      domainName,
      domainPrefix: domainName.split('.')[0]!,
      http: {
        method: req.method ?? 'GET',
        path: parts.rawPath,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp: (req.socket.remoteAddress ?? '127.0.0.1').replace(/^::ffff:/, ''),
        userAgent: headers['user-agent'] ?? '',
      },
      requestId: randomBytes(12).toString('base64').replace(/[+/]/g, 'A'),
      routeKey,
      stage: '$default',
      time: clfTime(now),
      timeEpoch: now.getTime(),
    },
    ...(atPrefix ? {} : { pathParameters: { proxy: parts.rawPath.slice(prefix.length + 1) } }),
    ...(parts.body.length ? { body: isText ? parts.body.toString('utf8') : parts.body.toString('base64') } : {}),
    isBase64Encoded: parts.body.length > 0 && !isText,
  };
  return event;
}

/** The payload 2.0 REQUEST event a Lambda authorizer gets for `event`. */
function authorizerEvent(event: APIGatewayProxyEventV2): Record<string, unknown> {
  const { http } = event.requestContext;
  return {
    version: '2.0',
    type: 'REQUEST',
    routeArn: `arn:aws:execute-api:${localRegion()}:${LOCAL_ACCOUNT}:${LOCAL_API_ID}/$default/${http.method}${http.path}`,
    identitySource: event.headers['x-auth-token'] ? [event.headers['x-auth-token']] : [],
    routeKey: event.routeKey,
    rawPath: event.rawPath,
    rawQueryString: event.rawQueryString,
    ...(event.cookies ? { cookies: event.cookies } : {}),
    headers: event.headers,
    ...(event.queryStringParameters ? { queryStringParameters: event.queryStringParameters } : {}),
    requestContext: event.requestContext,
    ...(event.pathParameters ? { pathParameters: event.pathParameters } : {}),
  };
}

/**
 * Writes a payload 2.0 result as API Gateway does: an object with `statusCode` is a structured
 * response; anything else is a 200 with the value as a JSON body.
 */
function writeResult(res: ServerResponse, result: unknown, isHead: boolean): void {
  if (result !== null && typeof result === 'object' && 'statusCode' in result) {
    const r = result as { statusCode: number; headers?: Record<string, string | number | boolean>; cookies?: string[]; body?: string; isBase64Encoded?: boolean };
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(r.headers ?? {})) headers[k.toLowerCase()] = String(v);
    if (r.cookies?.length) headers['set-cookie'] = r.cookies;
    const body = r.body === undefined || r.body === null ? Buffer.alloc(0) : Buffer.from(String(r.body), r.isBase64Encoded ? 'base64' : 'utf8');
    res.writeHead(r.statusCode, headers);
    res.end(isHead ? undefined : body);
    return;
  }
  const body = typeof result === 'string' ? result : JSON.stringify(result);
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(isHead ? undefined : body);
}

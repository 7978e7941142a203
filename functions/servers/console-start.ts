/**
 * The first steps of a server machine started from the console (the AWS console, `aws
 * stepfunctions start-execution`) with the API request it stands for instead of the API's
 * `{serverId, requestId, cellUuid}` (docs/state-machines.md "Server machines" gives each machine's
 * input). The machine's first state, a Choice, sends such an input here:
 *
 * - `record` runs the very route handler the HTTP API runs for that request
 *   (functions/servers/routes.ts: body validation, policy checks as the given user, the
 *   conditional write of beginOperation) with `startedAs` set, so the operation is recorded under
 *   this execution's name and no machine is started (this one runs). It answers the API's input
 *   for the following states. A refusal writes nothing and fails the step with the API's error.
 * - `record-failed` (the Catch of `record`) abandons what a run that failed part-way left
 *   recorded (abandon.ts, as the reconciler does after the API's crash; the reconciler skips an
 *   operation whose execution exists, so the machine does it itself). Otherwise it does nothing.
 *
 * The request id (and server-create's server uuid) is derived from the machine and execution name
 * (engine.ts consoleRequestId), so a re-run of `record` — a Retry, an execution the local stack
 * resumes after a restart — finds what an earlier run recorded and answers the same, writing nothing.
 */
import type { APIGatewayProxyEventV2WithLambdaAuthorizer } from 'aws-lambda';
import type { ApiRequest, Method, StartedAs } from '../core/api.js';
import { authFromEvent, parseNoAuthToken, type AuthorizerContext } from '../core/auth.js';
import { BadRequest, ConfigurationError, Conflict, InvariantViolation } from '../core/errors.js';
import { STATE_MACHINE_NAMES, type StateMachineName } from '../core/machines.js';
import { ApiVersion, COMPUTE_VERSIONS } from '../core/microversion.js';
import { authorize } from '../core/policy.js';
import { isObject } from '../compute/validation.js';
import { abandonOperation, type AbandonOutcome } from './abandon.js';
import { consoleRequestId, consoleServerId } from './engine.js';
import type { ServerOperation } from './model.js';
import { findServer, loadPartition, serverNotFound } from './repo.js';
import { SERVER_ROUTES } from './routes.js';

/** What the Record and RecordFailed states pass (their Parameters in statemachines/server-*.asl.json). */
export interface ConsoleStepInput {
  step: 'record' | 'record-failed';
  /** The machine's wiring name, written in its ASL file. */
  machine: string;
  /** `$$.Execution.Name`. */
  executionName: string;
  /** The execution's input (RecordFailed: with the caught `error`). */
  input: unknown;
}

/** The API's input of every server machine: what `record` answers for the following states. */
export interface ServerStart {
  serverId: string;
  requestId: string;
  cellUuid: string;
}

/** The console input's fields; anything else is refused, so a misspelt field is not silently ignored. */
const INPUT_FIELDS = ['serverId', 'request', 'projectId', 'userId'];

/** The nova microversion a console request is read at: the newest, as a current client sends. */
const CONSOLE_VERSION = new ApiVersion(COMPUTE_VERSIONS.major, COMPUTE_VERSIONS.maxMinor);

type ServerMachine = Extract<StateMachineName, `server-${string}`>;
const SERVER_MACHINES = STATE_MACHINE_NAMES.filter((m): m is ServerMachine => m.startsWith('server-'));

/**
 * The `POST /servers/{id}/action` keys each action machine runs: the API's dispatch picks the
 * machine from the key, so a console start takes only the keys of its own machine. (Confirm and
 * revert take the same key in their same-cell and cross-cell machines: beginOperation refuses the
 * one the server's migration does not run, assertStartedBy.)
 */
const ACTIONS: Partial<Record<ServerMachine, readonly string[]>> = {
  'server-power': ['os-stop', 'os-start', 'reboot', 'pause', 'unpause', 'suspend', 'resume', 'rebuild'],
  'server-live-migrate': ['os-migrateLive'],
  'server-resize': ['resize', 'migrate'],
  'server-confirm-resize': ['confirmResize'],
  'server-cross-cell-confirm': ['confirmResize'],
  'server-revert-resize': ['revertResize'],
  'server-cross-cell-revert': ['revertResize'],
  'server-evacuate': ['evacuate'],
  'server-shelve': ['shelve', 'shelveOffload'],
  'server-unshelve': ['unshelve'],
};

interface ConsoleInput {
  serverId?: string;
  request?: unknown;
  projectId: string;
  userId: string;
}

/** The HTTP request a console input stands for: the route (as SERVER_ROUTES names it), its path parameters and body. */
interface RouteCall {
  method: Method;
  path: string;
  params: Record<string, string>;
  body: unknown;
}

function serverMachine(name: string): ServerMachine {
  // A name no server machine has is an ASL file out of step with this code, not a request.
  if (!(SERVER_MACHINES as readonly string[]).includes(name)) throw new ConfigurationError(`the Record step names ${JSON.stringify(name)}, which is not a server state machine`);
  return name as ServerMachine;
}

const identity = (v: unknown, field: string): string => {
  if (v === undefined) return 'admin';
  if (typeof v !== 'string' || !/^[^:\s]+$/.test(v)) throw new BadRequest(`${field} must be a non-empty string without ':' or spaces (default admin)`);
  return v;
};

function parseInput(machine: ServerMachine, raw: unknown): ConsoleInput {
  if (!isObject(raw)) throw new BadRequest(`The input of ${machine} is an object: {serverId, request, projectId, userId} (docs/state-machines.md)`);
  const unknown = Object.keys(raw).filter((k) => !INPUT_FIELDS.includes(k));
  if (unknown.length) throw new BadRequest(`Unknown field(s) ${unknown.join(', ')} in the input of ${machine}: a console start takes ${INPUT_FIELDS.join(', ')}`);
  const create = machine === 'server-create';
  if (create && raw.serverId !== undefined) throw new BadRequest('server-create names the server itself (from the execution name): give no serverId');
  if (!create && (typeof raw.serverId !== 'string' || raw.serverId === '')) throw new BadRequest(`serverId (the server's uuid) is required by ${machine}`);
  return {
    ...(create ? {} : { serverId: raw.serverId as string }),
    ...(raw.request !== undefined ? { request: raw.request } : {}),
    projectId: identity(raw.projectId, 'projectId'),
    userId: identity(raw.userId, 'userId'),
  };
}

/** The one key of an object request other than `allowed`, if any, as a refusal. */
function onlyFields(request: Record<string, unknown>, allowed: string[], machine: string): void {
  const extra = Object.keys(request).filter((k) => !allowed.includes(k));
  if (extra.length) throw new BadRequest(`Unknown field(s) ${extra.join(', ')} in the request of ${machine}: it takes ${allowed.join(', ')}`);
}

function routeCall(machine: ServerMachine, c: ConsoleInput): RouteCall {
  const server = { server_id: c.serverId ?? '' };
  const actions = ACTIONS[machine];
  if (actions) {
    const key = isObject(c.request) && Object.keys(c.request).length === 1 ? Object.keys(c.request)[0]! : undefined;
    if (!key || !actions.includes(key)) {
      throw new BadRequest(`${machine} takes as request the body of POST /servers/{id}/action with one of ${actions.map((a) => `"${a}"`).join(', ')}`);
    }
    return { method: 'POST', path: '/servers/{server_id}/action', params: server, body: c.request };
  }
  const attachments = '/servers/{server_id}/os-volume_attachments';
  switch (machine) {
    case 'server-create':
      return { method: 'POST', path: '/servers', params: {}, body: c.request };
    case 'server-delete':
      if (c.request !== undefined && c.request !== null) throw new BadRequest('server-delete takes no request: only serverId');
      return { method: 'DELETE', path: '/servers/{server_id}', params: server, body: undefined };
    case 'server-attach-volume':
      return { method: 'POST', path: attachments, params: server, body: c.request };
    case 'server-detach-volume':
    case 'server-swap-volume': {
      // The path's {volume_id} (the attached volume) is `volumeId`; a swap adds the PUT's body.
      const swap = machine === 'server-swap-volume';
      const r = c.request;
      if (!isObject(r) || typeof r.volumeId !== 'string' || r.volumeId === '') throw new BadRequest(`${machine} takes as request {"volumeId": "<the attached volume>"${swap ? ', "volumeAttachment": {"volumeId": "<the new volume>"}' : ''}}`);
      onlyFields(r, swap ? ['volumeId', 'volumeAttachment'] : ['volumeId'], machine);
      const params = { ...server, volume_id: r.volumeId };
      if (!swap) return { method: 'DELETE', path: `${attachments}/{volume_id}`, params, body: undefined };
      // The same PUT with the attached volume's own id changes delete_on_termination only: not a swap.
      if (isObject(r.volumeAttachment) && r.volumeAttachment.volumeId === r.volumeId) throw new BadRequest('server-swap-volume swaps the attached volume for another: volumeAttachment.volumeId is the attached volume');
      return { method: 'PUT', path: `${attachments}/{volume_id}`, params, body: { volumeAttachment: r.volumeAttachment } };
    }
    default:
      throw new ConfigurationError(`${machine} has no console request`);
  }
}

/**
 * The API Gateway event of the request (what an ApiRequest carries): who calls is the given user
 * and project under the noauth convention (`admin` is an administrator), read back by authFromEvent
 * exactly as the API reads its authorizer's answer.
 */
function consoleEvent(call: RouteCall, c: ConsoleInput, startedAs: StartedAs, requestId: string): APIGatewayProxyEventV2WithLambdaAuthorizer<AuthorizerContext> {
  const path = '/compute/v2.1' + call.path.replace(/\{(\w+)\}/g, (_m, k: string) => encodeURIComponent(call.params[k] ?? ''));
  const at = new Date();
  return {
    version: '2.0',
    routeKey: `${call.method} /compute/v2.1${call.path}`,
    rawPath: path,
    rawQueryString: '',
    headers: { 'openstack-api-version': `compute ${CONSOLE_VERSION}`, 'user-agent': `ferry-console-start ${startedAs.machine}` },
    requestContext: {
      accountId: 'console-start',
      apiId: 'console-start',
      domainName: 'console-start',
      domainPrefix: 'console-start',
      http: { method: call.method, path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: `ferry-console-start ${startedAs.machine}` },
      requestId,
      routeKey: `${call.method} /compute/v2.1${call.path}`,
      stage: '$default',
      time: at.toISOString(),
      timeEpoch: at.getTime(),
      authorizer: { lambda: parseNoAuthToken(`${c.userId}:${c.projectId}`)! },
    },
    ...(call.body !== undefined ? { body: JSON.stringify(call.body) } : {}),
    pathParameters: call.params,
    isBase64Encoded: false,
  };
}

/** This request's operation on the server (in flight), or its instance action (the operation ended), else undefined. */
async function recorded(serverId: string, requestId: string): Promise<{ cellUuid: string; operation?: ServerOperation } | undefined> {
  const found = await findServer(serverId);
  if (!found) return undefined;
  const { instance, actions } = await loadPartition(found.cell, serverId);
  if (instance?.operation?.requestId === requestId) return { cellUuid: found.cell.uuid, operation: instance.operation };
  if (actions.some((a) => a.requestId === requestId)) return { cellUuid: found.cell.uuid };
  return undefined;
}

/** The Record step: the API action of the request, recorded under this execution; the API's input for the next states. */
async function record(input: ConsoleStepInput): Promise<ServerStart> {
  const machine = serverMachine(input.machine);
  const startedAs: StartedAs = { machine, executionName: input.executionName };
  const c = parseInput(machine, input.input);
  const requestId = consoleRequestId(startedAs);
  const serverId = machine === 'server-create' ? consoleServerId(startedAs) : c.serverId!;
  const start = (cellUuid: string): ServerStart => ({ serverId, requestId, cellUuid });

  // A re-run: the first run recorded it (and the operation may have run since; its steps know).
  const earlier = await recorded(serverId, requestId);
  if (earlier) return start(earlier.cellUuid);

  const call = routeCall(machine, c);
  const route = SERVER_ROUTES.find((r) => r.method === call.method && r.path === call.path);
  if (!route) throw new ConfigurationError(`no route ${call.method} ${call.path} for ${machine}`);
  const event = consoleEvent(call, c, startedAs, requestId);
  const req: ApiRequest = {
    event,
    auth: authFromEvent(event),
    version: CONSOLE_VERSION,
    params: call.params,
    query: new URLSearchParams(),
    body: call.body,
    baseUrl: '',
    requestId,
    startedAs,
  };
  try {
    // As createApiHandler does before the handler: routes whose policy has no target are checked here.
    if ((route.authorizeBy ?? 'none') === 'none') authorize(req.auth, route.action);
    await route.handler(req);
  } catch (e) {
    // Recorded, then the action's own part failed (beginOperation abandoned it, or RecordFailed
    // will): the refusal is final, never retried into "recorded already" by the check above.
    if (await recorded(serverId, requestId)) throw new Conflict(`The request was recorded, then undone: ${(e as Error).message}`);
    throw e;
  }
  const now = await recorded(serverId, requestId);
  if (now?.operation && now.operation.executionName !== input.executionName) {
    // An action that ignored startedAs has started a second execution for the operation.
    throw new InvariantViolation(`the operation of ${requestId} runs as ${now.operation.executionName}, not as this execution ${input.executionName}`);
  }
  if (now) return start(now.cellUuid);
  // The API accepted it without an operation (a delete of a server being deleted answers 204):
  // nothing to run; the next states find no operation of this request and change nothing.
  const server = await findServer(serverId);
  if (!server) throw serverNotFound(serverId);
  return start(server.cell.uuid);
}

/** The RecordFailed step: abandons this request's operation if a failed Record left it on the server. */
async function recordFailed(input: ConsoleStepInput): Promise<{ abandoned: AbandonOutcome }> {
  const machine = serverMachine(input.machine);
  const startedAs: StartedAs = { machine, executionName: input.executionName };
  const raw = isObject(input.input) ? input.input : {};
  const serverId = machine === 'server-create' ? consoleServerId(startedAs) : typeof raw.serverId === 'string' && raw.serverId ? raw.serverId : undefined;
  if (!serverId) return { abandoned: 'not-found' };
  const found = await findServer(serverId);
  const requestId = consoleRequestId(startedAs);
  if (!found || found.instance.operation?.requestId !== requestId) return { abandoned: 'not-found' };
  return { abandoned: await abandonOperation(found.cell.uuid, serverId, requestId, { byExecution: input.executionName }) };
}

export async function consoleStep(input: ConsoleStepInput): Promise<unknown> {
  return input.step === 'record' ? record(input) : recordFailed(input);
}

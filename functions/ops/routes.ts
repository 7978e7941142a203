/**
 * Ferry's own HTTP routes under /ferry (the `ops-api` function of the wiring table; the local
 * stack and the deployed HTTP API route /ferry to it alike):
 *
 *   GET /ferry/console   the operator console (console-page.ts); public: a page with no data
 *   GET /ferry/ops       {operations, backends, lastAudit} as JSON, `?since=24h` (policy ferry:ops)
 *
 * Not a Cinder/Manila/Nova API, so no microversions: a plain handler, with the same fault bodies.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { faultBody } from '../core/api.js';
import { authFromEvent } from '../core/auth.js';
import { BadRequest, FerryError, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { getLastAudit } from '../audit/last-audit.js';
import { CONSOLE_PAGE } from './console-page.js';
import { listOperations, listVolumeBackends, DEFAULT_SINCE_HOURS } from './read.js';

registerPolicies({ 'ferry:ops': 'admin_api' });

const json = (statusCode: number, body: unknown): APIGatewayProxyStructuredResultV2 => ({ statusCode, headers: { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }, body: JSON.stringify(body) });

const SINCE = /^(\d+(?:\.\d+)?)([smhd])$/;
const UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** `?since=30m|24h|7d` as a time; default DEFAULT_SINCE_HOURS ago. */
function sinceOf(query: string | undefined): Date {
  const raw = new URLSearchParams(query ?? '').get('since');
  if (raw === null) return new Date(Date.now() - DEFAULT_SINCE_HOURS * 3_600_000);
  const m = SINCE.exec(raw);
  if (!m) throw new BadRequest(`since must be a duration like 30m, 24h or 7d, not "${raw}"`);
  return new Date(Date.now() - Number(m[1]) * UNIT_SECONDS[m[2]!]! * 1000);
}

/** What GET /ferry/ops answers: the operations, the volume backends' replication, the last audit. */
export async function opsDocument(since: Date) {
  const [operations, backends, lastAudit] = await Promise.all([listOperations({ since }), listVolumeBackends(), getLastAudit()]);
  return { operations, backends: backends.sort((a, b) => a.host.localeCompare(b.host)), lastAudit: lastAudit ?? null };
}

export async function handleFerryRequest(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> {
  const method = event.requestContext.http.method;
  const path = event.requestContext.http.path.replace(/\/+$/, '');
  try {
    if (method !== 'GET' && method !== 'HEAD') throw new NotFound();
    if (path === '/ferry/console') return { statusCode: 200, headers: { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' }, body: CONSOLE_PAGE };
    if (path === '/ferry/ops') {
      authorize(authFromEvent(event), 'ferry:ops');
      return json(200, await opsDocument(sinceOf(event.rawQueryString)));
    }
    throw new NotFound();
  } catch (e) {
    if (e instanceof FerryError) {
      if (e.status >= 500) logger.error('request failed', { error: e });
      return json(e.status, faultBody(e));
    }
    logger.error('unhandled error', { error: e as Error });
    return json(500, { computeFault: { code: 500, message: 'The server has either erred or is incapable of performing the requested operation.' } });
  }
}

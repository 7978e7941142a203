/**
 * The API half of live migration (`os-migrateLive`, reference §2.1 row Live migration): the body
 * by microversion, the host checks and the drivers' capabilities, then the Migration (accepted),
 * task_state migrating and server-live-migrate. The steps are in steps.ts.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { BadRequest, NotFound } from '../../../core/errors.js';
import type { ApiVersion } from '../../../core/microversion.js';
import { registerPolicies } from '../../../core/policy.js';
import { invalid, isObject } from '../../../compute/validation.js';
import type { ServerActionSpec } from '../../actions.js';
import { requireLiveMigration } from '../../capabilities.js';
import { assertState, beginOperation, nodeOfHost, type HostNode } from '../../engine.js';
import { migrationPutItem, nextMigrationId } from '../../migrations.js';
import { newMigration } from '../../model.js';
import type { LoadedServer } from '../../repo.js';

const now = () => new Date().toISOString();

export const LIVE_MIGRATE_POLICY = 'os_compute_api:os-migrate-server:migrate_live';
registerPolicies({ [LIVE_MIGRATE_POLICY]: 'admin_api' });

// ---------------------------------------------------------------------------------------------
// API: body validation (nova/api/openstack/compute/schemas/migrate_server.py)

/** Python's repr of a JSON value, as jsonschema's messages print it. */
function pyRepr(v: unknown): string {
  if (v === null || v === undefined) return 'None';
  if (v === true) return 'True';
  if (v === false) return 'False';
  if (typeof v === 'string') return `'${v}'`;
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(', ')}]`;
  if (isObject(v)) return `{${Object.entries(v).map(([k, x]) => `'${k}': ${pyRepr(x)}`).join(', ')}}`;
  return String(v);
}

/** parameter_types.boolean's enum. */
const BOOLEAN_ENUM: unknown[] = [true, 'True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes', false, 'False', 'FALSE', 'false', '0', 'OFF', 'Off', 'off', 'NO', 'No', 'no'];
const TRUE_STRINGS = new Set(['True', 'TRUE', 'true', '1', 'ON', 'On', 'on', 'YES', 'Yes', 'yes']);
const HOST_PATTERN = /^[a-zA-Z0-9-._]*$/;

export interface LiveMigrateBody {
  host: string | null;
  blockMigration: boolean | 'auto';
  force: boolean;
}

/** The body of os-migrateLive as the microversion's schema allows it (reference §3.2). */
export function parseLiveMigrateBody(args: unknown, version: ApiVersion): LiveMigrateBody {
  if (!isObject(args)) throw invalid('os-migrateLive', args, `${pyRepr(args)} is not of type 'object'`);
  const legacy = !version.atLeast('2.25');
  const withForce = version.atLeast('2.30') && !version.atLeast('2.68');
  const allowed = ['host', 'block_migration', ...(legacy ? ['disk_over_commit'] : []), ...(withForce ? ['force'] : [])];
  const required = ['host', 'block_migration', ...(legacy ? ['disk_over_commit'] : [])];
  for (const key of required) if (!(key in args)) throw invalid('os-migrateLive', args, `'${key}' is a required property`);
  const extra = Object.keys(args).filter((k) => !allowed.includes(k));
  if (extra.length) throw invalid('os-migrateLive', args, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);

  const host = args.host;
  if (host !== null) {
    if (typeof host !== 'string') throw invalid('host', host, `${pyRepr(host)} is not of type 'string', 'null'`);
    if (host.length < 1) throw invalid('host', host, `${pyRepr(host)} is too short`);
    if (host.length > 255) throw invalid('host', host, `${pyRepr(host)} is too long`);
    if (!HOST_PATTERN.test(host)) throw invalid('host', host, `${pyRepr(host)} does not match '^[a-zA-Z0-9-._]*$'`);
  }
  const bm = args.block_migration;
  const bmEnum = legacy ? BOOLEAN_ENUM : [...BOOLEAN_ENUM, 'auto'];
  if (!bmEnum.includes(bm)) throw invalid('block_migration', bm, `${pyRepr(bm)} is not one of ${pyRepr(bmEnum)}`);
  if (legacy && !BOOLEAN_ENUM.includes(args.disk_over_commit)) throw invalid('disk_over_commit', args.disk_over_commit, `${pyRepr(args.disk_over_commit)} is not one of ${pyRepr(BOOLEAN_ENUM)}`);
  let force = false;
  if (withForce && 'force' in args) {
    if (!BOOLEAN_ENUM.includes(args.force)) throw invalid('force', args.force, `${pyRepr(args.force)} is not one of ${pyRepr(BOOLEAN_ENUM)}`);
    force = args.force === true || TRUE_STRINGS.has(String(args.force));
  }
  if (force && !host) throw new BadRequest("Can't force to a non-provided destination");
  const blockMigration = bm === 'auto' ? 'auto' : bm === true || TRUE_STRINGS.has(String(bm));
  return { host: host as string | null, blockMigration, force };
}

// ---------------------------------------------------------------------------------------------
// API: compute.api.live_migrate

const LIVE_MIGRATE_VM_STATES = ['active', 'paused'] as const;

/** The host's node, or undefined when there is no such host (only NotFound means none: a failed read fails the request). */
async function hostNodeOrUndefined(host: string): Promise<HostNode | undefined> {
  try {
    return await nodeOfHost(host);
  } catch (e) {
    if (e instanceof NotFound) return undefined;
    throw e;
  }
}

async function liveMigrate(req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> {
  const body = parseLiveMigrateBody(args, req.version);
  const { instance, cell } = server;
  if (body.host) {
    const found = await hostNodeOrUndefined(body.host);
    if (!found) throw new BadRequest(`Compute host ${body.host} could not be found.`);
    if (body.host === instance.host) throw new BadRequest(`Unable to migrate instance (${instance.uuid}) to current host (${instance.host}).`);
    // Live migration never crosses cells (conductor's same-cell check, made here so the caller hears it).
    if (found.cell.uuid !== cell.uuid) throw new BadRequest(`Migration pre-check error: Unable to live migrate instance ${instance.uuid} across cells.`);
  }
  // check_instance_state before anything is written (a refused request must not use up a migration id).
  assertState(instance, 'live-migration', LIVE_MIGRATE_VM_STATES);
  // The source's driver must live-migrate, and a named destination's (a scheduled one is not known yet: its driver refuses then).
  if (instance.host) await requireLiveMigration(instance.host);
  if (body.host) await requireLiveMigration(body.host);
  const migrationUuid = randomUUID();
  const migrationId = await nextMigrationId(cell);
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'live_migration',
    action: 'live-migration',
    vmStates: LIVE_MIGRATE_VM_STATES,
    taskState: 'migrating',
    machine: 'server-live-migrate',
    requestId: req.requestId,
    startedAs: req.startedAs,
    migrationUuid,
    params: { host: body.host, blockMigration: body.blockMigration, force: body.force },
    change: (current) => {
      const at = now();
      const migration = newMigration({ id: migrationId, uuid: migrationUuid, instance: current, migrationType: 'live-migration', status: 'accepted', userId: req.auth.userId, at });
      return { extra: [migrationPutItem(cell, migration, { create: true })] };
    },
  });
  return json(202);
}

export const LIVE_MIGRATION_ACTIONS: Record<string, ServerActionSpec> = { 'os-migrateLive': { policy: LIVE_MIGRATE_POLICY, handler: liveMigrate } };

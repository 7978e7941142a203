/**
 * The API half of cold migration and same-cell resize with confirm and revert (reference §1.0 API
 * checks, §2.1 rows "Cold migrate / same-cell resize", "Confirm (same cell)", "Revert (same
 * cell)"): the actions `resize`, `migrate`, `confirmResize`, `revertResize` (bodies, state and
 * flavor checks in Nova's order, the migration record, the machine). The steps are steps.ts
 * (server-resize) and resolve-steps.ts (server-confirm-resize, server-revert-resize).
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { BadRequest, Conflict } from '../../../core/errors.js';
import { allowed, registerPolicies } from '../../../core/policy.js';
import { upOf } from '../../../compute/liveness.js';
import { COMPUTE_BINARY } from '../../../compute/model.js';
import { findServiceByHostBinary, getFlavor } from '../../../compute/repo.js';
import { invalid, isObject, type Json } from '../../../compute/validation.js';
import type { ServerActionSpec } from '../../actions.js';
import { assertState, beginOperation, computeNodes } from '../../engine.js';
import { listMigrations, migrationPutItem, nextMigrationId } from '../../migrations.js';
import { instanceFlavorOf, newMigration, type InstanceFlavor, type Migration, type VmState } from '../../model.js';
import type { LoadedServer } from '../../repo.js';
import { isVolumeBacked } from '../block-devices.js';

const now = () => new Date().toISOString();

export const RESIZE_POLICIES = {
  resize: 'os_compute_api:servers:resize',
  confirmResize: 'os_compute_api:servers:confirm_resize',
  revertResize: 'os_compute_api:servers:revert_resize',
  migrate: 'os_compute_api:os-migrate-server:migrate',
  /** Nova's `compute:servers:resize:cross_cell`: may a resize or cold migration leave the server's cell. */
  crossCell: 'compute:servers:resize:cross_cell',
} as const;

registerPolicies({
  [RESIZE_POLICIES.resize]: 'admin_or_owner',
  [RESIZE_POLICIES.confirmResize]: 'admin_or_owner',
  [RESIZE_POLICIES.revertResize]: 'admin_or_owner',
  [RESIZE_POLICIES.migrate]: 'admin_api',
  // Nobody by default, as upstream: a cross-cell move snapshots and respawns the guest.
  [RESIZE_POLICIES.crossCell]: '!',
});

/** Whether this request may move the server across cells (checked against the server's project). */
export function crossCellAllowed(req: Pick<ApiRequest, 'auth'>, server: Pick<LoadedServer, 'instance'>): boolean {
  return allowed(req.auth, RESIZE_POLICIES.crossCell, { projectId: server.instance.projectId });
}

function onlyKeys(field: string, value: Json, allowed: string[]): void {
  const extra = Object.keys(value).filter((k) => !allowed.includes(k));
  if (extra.length) throw invalid(field, value, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
}

// ---------------------------------------------------------------------------------------------
// API

const RESIZE_VM_STATES: readonly VmState[] = ['active', 'stopped'];

/** API.resize for both actions: the migration record, task resize_prep, the action, the machine. */
async function startMove(req: ApiRequest, server: LoadedServer, action: 'resize' | 'migrate', newFlavor: InstanceFlavor, host?: string): Promise<void> {
  const { cell, instance: seen } = server;
  const id = await nextMigrationId(cell);
  const at = now();
  const migration = newMigration({
    id,
    uuid: randomUUID(),
    instance: seen,
    migrationType: newFlavor.flavorid === seen.flavor.flavorid ? 'migration' : 'resize',
    status: 'pre-migrating',
    newInstanceTypeId: newFlavor.id,
    at,
  });
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'resize',
    action,
    vmStates: RESIZE_VM_STATES,
    taskState: 'resize_prep',
    machine: 'server-resize',
    requestId: req.requestId,
    startedAs: req.startedAs,
    migrationUuid: migration.uuid,
    params: { newFlavor, allowCrossCell: crossCellAllowed(req, server), ...(host ? { host } : {}) },
    change: (instance) => ({
      instance: {
        ...instance,
        progress: 0,
        oldFlavor: instance.flavor,
        newFlavor,
        systemMetadata: { ...instance.systemMetadata, old_vm_state: instance.vmState, image_base_image_ref: instance.imageRef },
      },
      extra: [migrationPutItem(cell, { ...migration, sourceCompute: instance.host, sourceNode: instance.node }, { create: true })],
    }),
  });
}

async function resizeAction(req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> {
  if (!isObject(args)) throw invalid('resize', args, `${JSON.stringify(args)} is not of type 'object'`);
  onlyKeys('resize', args, ['flavorRef', 'OS-DCF:diskConfig']);
  const ref = args.flavorRef;
  if (ref === undefined) throw invalid('resize', args, "'flavorRef' is a required property");
  if ((typeof ref !== 'string' && typeof ref !== 'number') || String(ref).length < 1) throw invalid('flavorRef', ref, `${JSON.stringify(ref)} is not valid under any of the given schemas`);
  const diskConfig = args['OS-DCF:diskConfig'];
  if (diskConfig !== undefined && diskConfig !== 'AUTO' && diskConfig !== 'MANUAL') throw invalid('OS-DCF:diskConfig', diskConfig, "is not one of ['AUTO', 'MANUAL']");
  const { instance } = server;
  // check_instance_state runs before the flavor checks (decorator order of API.resize).
  assertState(instance, 'resize', RESIZE_VM_STATES);
  // A flavor id is at most 255 characters (Nova's column); a longer one names no flavor (and is no valid DynamoDB key).
  const flavor = String(ref).length > 255 ? undefined : await getFlavor(String(ref));
  if (!flavor || flavor.disabled) throw new BadRequest('Unable to locate requested flavor.');
  if (flavor.flavorid === instance.flavor.flavorid) throw new BadRequest('Resize requires a flavor change.');
  if (!isVolumeBacked(instance) && flavor.rootGb < instance.flavor.rootGb) throw new BadRequest('Unable to resize disk down.');
  await startMove(req, server, 'resize', instanceFlavorOf(flavor));
  return json(202);
}

async function migrateAction(req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> {
  let host: string | undefined;
  // Before 2.56 the body is not validated and a host is ignored.
  if (req.version.atLeast('2.56') && args !== null) {
    if (!isObject(args)) throw invalid('migrate', args, `${JSON.stringify(args)} is not of type 'object', 'null'`);
    onlyKeys('migrate', args, ['host']);
    if (args.host !== undefined && args.host !== null && typeof args.host !== 'string') throw invalid('host', args.host, `${JSON.stringify(args.host)} is not of type 'string', 'null'`);
    host = typeof args.host === 'string' ? args.host : undefined;
  }
  const { instance } = server;
  assertState(instance, 'migrate', RESIZE_VM_STATES);
  if (host !== undefined) {
    if (host === instance.host) throw new BadRequest('Cannot migrate to the host where the server exists.');
    await assertMigrateHost(host, server, crossCellAllowed(req, server));
  }
  await startMove(req, server, 'migrate', instance.flavor, host);
  return json(202);
}

/**
 * A requested migrate host must have a compute node: in any cell when cross-cell moves are
 * allowed, else in the server's own cell (a host elsewhere is "not found", as upstream's
 * cell-targeted lookup answers).
 */
export async function assertMigrateHost(host: string, server: Pick<LoadedServer, 'cell'>, allowCrossCell: boolean): Promise<void> {
  const node = (await computeNodes()).find((n) => n.node.host === host && (allowCrossCell || n.cell.uuid === server.cell.uuid));
  if (!node) throw new BadRequest(`Compute host ${host} could not be found.`);
}

/** The instance's migration in status 'finished' (Migration.get_by_instance_and_status). */
async function finishedMigration(server: LoadedServer): Promise<Migration> {
  const found = (await listMigrations()).find((m) => m.cell.uuid === server.cell.uuid && m.migration.instanceUuid === server.instance.uuid && m.migration.status === 'finished');
  if (!found) throw new BadRequest('Instance has not been resized.');
  return found.migration;
}

/** ServiceUnavailable (409 from the controller) when the migration's source compute is down or gone. */
async function assertSourceComputeUp(m: Migration): Promise<void> {
  const svc = m.sourceCompute ? await findServiceByHostBinary(m.sourceCompute, COMPUTE_BINARY) : undefined;
  if (!svc || !(await upOf(svc))) throw new Conflict('Service is unavailable at this time.');
}

function resolveAction(kind: 'confirm_resize' | 'revert_resize') {
  const confirm = kind === 'confirm_resize';
  const action = confirm ? 'confirmResize' : 'revertResize';
  // Nova's schema for both is `{}`: any value (Tempest sends `{}`, novaclient `null`), ignored.
  return async (req: ApiRequest, server: LoadedServer): Promise<ApiResponse> => {
    assertState(server.instance, action, ['resized']);
    const m = await finishedMigration(server);
    const crossCell = m.crossCellMove === true;
    // API.confirm_resize: the source compute must be up before the migration record changes,
    // else a failed confirm could not come back here (it looks for a 'finished' migration).
    if (confirm && crossCell) await assertSourceComputeUp(m);
    const kindOf = crossCell ? (confirm ? 'cross_cell_confirm' : 'cross_cell_revert') : kind;
    const machine = crossCell ? (confirm ? 'server-cross-cell-confirm' : 'server-cross-cell-revert') : confirm ? 'server-confirm-resize' : 'server-revert-resize';
    await beginOperation({
      server,
      auth: req.auth,
      kind: kindOf,
      action,
      vmStates: ['resized'],
      // The API leaves confirm's task_state alone (status stays VERIFY_RESIZE); revert shows REVERT_RESIZE.
      ...(confirm ? {} : { taskState: 'resize_reverting' as const }),
      machine,
      requestId: req.requestId,
      startedAs: req.startedAs,
      migrationUuid: m.uuid,
      change: (instance) => ({
        instance,
        extra: [migrationPutItem(server.cell, { ...m, status: confirm ? 'confirming' : 'reverting', updatedAt: now() }, { expectedStatus: 'finished' })],
      }),
    });
    return json(confirm ? 204 : 202);
  };
}

export const RESIZE_ACTIONS: Record<string, ServerActionSpec> = {
  resize: { policy: RESIZE_POLICIES.resize, handler: resizeAction },
  migrate: { policy: RESIZE_POLICIES.migrate, handler: migrateAction },
  confirmResize: { policy: RESIZE_POLICIES.confirmResize, handler: resolveAction('confirm_resize') },
  revertResize: { policy: RESIZE_POLICIES.revertResize, handler: resolveAction('revert_resize') },
};

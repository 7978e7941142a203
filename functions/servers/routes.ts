/**
 * The servers routes of the Nova v2.1 API (reference §3): servers create / list / detail / show /
 * delete, the action dispatcher (stop, start, reboot here; the move flows register theirs in
 * actions.ts), os-volume_attachments, os-instance-actions, os-migrations, server migrations and
 * the image proxy. Policies are nova 26.2.2's names with their defaults.
 */
import { randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse, type RouteSpec } from '../core/api.js';
import { BadRequest, Conflict, Forbidden, NotFound } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { findServiceByHostBinary, getCell, getFlavor, listCells } from '../compute/repo.js';
import { COMPUTE_BINARY, isUuidLike, serviceIsUp } from '../compute/model.js';
import { computeDriverFor } from '../drivers/compute/registry.js';
import { SANDBOX_NETWORK } from '../compute/seed.js';
import type { LinkContext } from '../compute/views.js';
import { POWER_STATE, ROOT_DEVICE_NAME } from '../drivers/compute/driver.js';
import { volumeGet } from './cinder.js';
import { beginOperation, computeNodes } from './engine.js';
import { candidates } from './scheduler.js';
import { SERVER_ACTIONS, registerServerActions } from './actions.js';
import { attachVolume, detachVolume, swapVolume } from './flows/volumes.js';
// The move flows register their server actions (registerServerActions) when loaded.
import './flows/live-migration.js';
import './flows/resize.js';
import './flows/evacuate.js';
import './flows/shelve.js';
import { getImage, listImages } from './images.js';
import { instanceFlavorOf, type BlockDeviceMapping, type Instance, type InstanceMapping } from './model.js';
import { addressesOf, listPortsOf } from './network.js';
import { createServerRecords, findServer, listInstances, listMigrations, loadPartition, newAction, updateServer, type LoadedServer } from './repo.js';
import { instanceActionDetailView, instanceActionView, migrationView, SERVER_HOST_STATUS_MIN, serverDetail, serverMigrationView, serverSummary, volumeAttachmentCreateView, volumeAttachmentView } from './views.js';
import { executionName, startExecution } from '../core/executions.js';
import { invalid, isObject, type Json } from '../compute/validation.js';

export const SERVER_POLICIES = {
  index: 'os_compute_api:servers:index',
  detail: 'os_compute_api:servers:detail',
  allTenants: 'os_compute_api:servers:index:get_all_tenants',
  show: 'os_compute_api:servers:show',
  create: 'os_compute_api:servers:create',
  delete: 'os_compute_api:servers:delete',
  start: 'os_compute_api:servers:start',
  stop: 'os_compute_api:servers:stop',
  reboot: 'os_compute_api:servers:reboot',
  attachmentsIndex: 'os_compute_api:os-volumes-attachments:index',
  attachmentsShow: 'os_compute_api:os-volumes-attachments:show',
  attachmentsCreate: 'os_compute_api:os-volumes-attachments:create',
  attachmentsUpdate: 'os_compute_api:os-volumes-attachments:update',
  attachmentsSwap: 'os_compute_api:os-volumes-attachments:swap',
  attachmentsDelete: 'os_compute_api:os-volumes-attachments:delete',
  actionsList: 'os_compute_api:os-instance-actions:list',
  actionsShow: 'os_compute_api:os-instance-actions:show',
  migrationsIndex: 'os_compute_api:os-migrations:index',
  serverMigrationsIndex: 'os_compute_api:servers:migrations:index',
  imagesIndex: 'os_compute_api:image-api',
} as const;

registerPolicies({
  [SERVER_POLICIES.index]: 'admin_or_owner',
  [SERVER_POLICIES.detail]: 'admin_or_owner',
  [SERVER_POLICIES.allTenants]: 'admin_api',
  [SERVER_POLICIES.show]: 'admin_or_owner',
  [SERVER_POLICIES.create]: 'admin_or_owner',
  [SERVER_POLICIES.delete]: 'admin_or_owner',
  [SERVER_POLICIES.start]: 'admin_or_owner',
  [SERVER_POLICIES.stop]: 'admin_or_owner',
  [SERVER_POLICIES.reboot]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsIndex]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsShow]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsCreate]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsUpdate]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsSwap]: 'admin_api',
  [SERVER_POLICIES.attachmentsDelete]: 'admin_or_owner',
  [SERVER_POLICIES.actionsList]: 'admin_or_owner',
  [SERVER_POLICIES.actionsShow]: 'admin_or_owner',
  [SERVER_POLICIES.migrationsIndex]: 'admin_api',
  [SERVER_POLICIES.serverMigrationsIndex]: 'admin_api',
  [SERVER_POLICIES.imagesIndex]: '@',
});

const now = () => new Date().toISOString();
const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });


/** The server if the caller may see it (project-scoped; admins see all), else Nova's 404. */
export async function visibleServer(req: ApiRequest, id: string): Promise<LoadedServer> {
  const found = await findServer(id);
  if (!found || found.instance.hidden || (!req.auth.isAdmin && found.instance.projectId !== req.auth.projectId)) throw new NotFound(`Instance ${id} could not be found.`);
  return found;
}

async function detailOf(req: ApiRequest, server: LoadedServer): Promise<Json> {
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const ports = await listPortsOf(server.instance.uuid);
  const addresses = await addressesOf(ports);
  // Only admins see host_status (2.16+): the service lookup is skipped for everyone else.
  const hostStatus = req.auth.isAdmin && req.version.atLeast(SERVER_HOST_STATUS_MIN) ? await hostStatusOf(server.instance.host) : undefined;
  return serverDetail(server.instance, { bdms, ports, addresses, hostStatus }, req.version, linkContext(req), { isAdmin: req.auth.isAdmin });
}

/** compute/api.py `get_instance_host_status`: '' without a host; DOWN, MAINTENANCE (disabled) or UP from its nova-compute service. */
async function hostStatusOf(host: string | null): Promise<string> {
  if (!host) return '';
  const svc = await findServiceByHostBinary(host, COMPUTE_BINARY);
  const node = (await computeNodes()).find((n) => n.node.host === host);
  if (!svc || !node) return 'UNKNOWN';
  const reporting = (await computeDriverFor(node.node.config).getHostInfo()).up;
  if (!serviceIsUp(svc.value, reporting)) return 'DOWN';
  return svc.value.disabled ? 'MAINTENANCE' : 'UP';
}

// ---------------------------------------------------------------------------------------------
// Create

interface BdmRequest {
  bootIndex: number | null;
  uuid: string;
  sourceType: 'volume' | 'image';
  destinationType: 'volume' | 'local';
  deleteOnTermination: boolean;
}

function parseBdms(raw: unknown): BdmRequest[] {
  if (raw === undefined) return [];
  if (!Array.isArray(raw)) throw invalid('block_device_mapping_v2', raw, `${JSON.stringify(raw)} is not of type 'array'`);
  return raw.map((b) => {
    if (!isObject(b)) throw invalid('block_device_mapping_v2', b, `${JSON.stringify(b)} is not of type 'object'`);
    const source = b.source_type ?? 'volume';
    if (source !== 'volume') throw new BadRequest('Block Device Mapping is Invalid: Ferry boots from an image (imageRef) or from an existing volume (source_type volume).');
    const dest = b.destination_type ?? 'volume';
    if (dest !== 'volume') throw new BadRequest('Block Device Mapping is Invalid: a volume source needs destination_type volume.');
    if (typeof b.uuid !== 'string' || !isUuidLike(b.uuid)) throw invalid('uuid', b.uuid, `${JSON.stringify(b.uuid)} is not a 'uuid'`);
    const bootIndex = b.boot_index === undefined || b.boot_index === null ? null : Number(b.boot_index);
    if (bootIndex !== null && !Number.isInteger(bootIndex)) throw invalid('boot_index', b.boot_index, 'not an integer');
    return { bootIndex, uuid: b.uuid, sourceType: 'volume', destinationType: 'volume', deleteOnTermination: b.delete_on_termination === true || b.delete_on_termination === 'true' };
  });
}

async function createServer(req: ApiRequest): Promise<ApiResponse> {
  const body = req.body;
  if (!isObject(body) || !isObject(body.server)) throw invalid('server', isObject(body) ? body.server : body, "'server' is a required property");
  const s = body.server;
  if (typeof s.name !== 'string' || s.name.length < 1 || s.name.length > 255) throw invalid('name', s.name, `${JSON.stringify(s.name ?? null)} is not a valid name`);
  if (s.flavorRef === undefined) throw invalid('server', s, "'flavorRef' is a required property");
  const bdmReqs = parseBdms(s.block_device_mapping_v2);
  const bootVolume = bdmReqs.find((b) => b.bootIndex === 0);
  const imageRef = typeof s.imageRef === 'string' ? s.imageRef : '';
  if (!imageRef && !bootVolume) throw new BadRequest('Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping combination is not valid.');
  // A flavor id is at most 255 characters (Nova's column); a longer one names no flavor (and is no valid DynamoDB key).
  const flavor = String(s.flavorRef).length > 255 ? undefined : await getFlavor(String(s.flavorRef));
  if (!flavor || flavor.disabled) throw new BadRequest('Invalid flavorRef provided.');
  if (imageRef) {
    const image = await getImage(imageRef).catch(() => undefined);
    if (!image || image.status !== 'active' || (image.visibility !== 'public' && image.ownerProjectId !== req.auth.projectId && !req.auth.isAdmin)) {
      throw new BadRequest(`Image ${imageRef} could not be found.`);
    }
  }
  for (const b of bdmReqs) {
    const v = await volumeGet(b.uuid);
    if (!v || (!req.auth.isAdmin && v.projectId !== req.auth.projectId)) throw new BadRequest(`Block Device Mapping is Invalid: failed to get volume ${b.uuid}.`);
    if (v.status !== 'available') throw new BadRequest(`Invalid volume: Volume ${b.uuid} status must be available, but current status is: ${v.status}`);
  }
  const networks = s.networks;
  if (networks !== undefined && networks !== 'auto' && networks !== 'none' && !Array.isArray(networks)) throw invalid('networks', networks, 'not one of auto, none or a list');
  let networkId: string | null = SANDBOX_NETWORK.id;
  if (networks === 'none') networkId = null;
  else if (Array.isArray(networks) && networks.length) {
    const first = networks[0];
    if (!isObject(first) || (first.uuid !== undefined && typeof first.uuid !== 'string')) throw invalid('networks', networks, 'bad network');
    if (first.uuid && first.uuid !== SANDBOX_NETWORK.id) throw new BadRequest(`Network ${String(first.uuid)} could not be found.`);
  }
  const az = typeof s.availability_zone === 'string' ? s.availability_zone : null;
  if (az && az !== 'nova') throw new BadRequest(`The requested availability zone is not available`);
  const host = typeof s.host === 'string' ? s.host : undefined;
  if (host && !req.auth.isAdmin) throw new Forbidden(`Policy doesn't allow compute:servers:create:requested_destination to be performed.`);

  // Nova's conductor creates the instance in the cell of the host the scheduler picked. Ferry
  // records the instance (in its cell's table) before the machine runs, so the API asks the
  // scheduler's filters and weighers which host would win now and takes that host's cell; the
  // machine then claims on a host of that cell. With no candidate the boot goes to the first cell
  // and fails there with NoValidHost (ERROR), as in Nova.
  const uuid = randomUUID();
  if (host && !(await computeNodes()).some((n) => n.node.host === host)) throw new BadRequest(`Compute host ${host} could not be found.`);
  const best = (await candidates({ flavor: instanceFlavorOf(flavor), consumer: uuid, volumeBacked: !imageRef, host, availabilityZone: az }))[0];
  const cellUuid = best?.cell.uuid ?? (await listCells())[0]!.uuid;
  const cell = (await getCell(cellUuid))!;

  const at = now();
  const instance: Instance = {
    uuid,
    name: s.name,
    projectId: req.auth.projectId,
    userId: req.auth.userId,
    flavor: instanceFlavorOf(flavor),
    oldFlavor: null,
    newFlavor: null,
    imageRef,
    host: null,
    node: null,
    availabilityZone: az,
    vmState: 'building',
    taskState: 'scheduling',
    powerState: POWER_STATE.NOSTATE,
    progress: 0,
    metadata: isObject(s.metadata) ? (Object.fromEntries(Object.entries(s.metadata).map(([k, v]) => [k, String(v)])) as Record<string, string>) : {},
    keyName: typeof s.key_name === 'string' ? s.key_name : null,
    systemMetadata: imageRef ? { image_base_image_ref: imageRef } : {},
    hidden: false,
    locked: false,
    fault: null,
    operation: null,
    launchedAt: null,
    terminatedAt: null,
    createdAt: at,
    updatedAt: at,
    version: 1,
  };
  const bdms: BlockDeviceMapping[] = bdmReqs.map((b, i) => ({
    uuid: randomUUID(),
    instanceUuid: uuid,
    sourceType: 'volume',
    destinationType: 'volume',
    volumeId: b.uuid,
    imageId: null,
    bootIndex: b.bootIndex,
    deviceName: b.bootIndex === 0 ? ROOT_DEVICE_NAME : `/dev/vd${String.fromCharCode('b'.charCodeAt(0) + i)}`,
    attachmentId: null,
    connectionInfo: null,
    deleteOnTermination: b.deleteOnTermination,
    tag: null,
    volumeSize: null,
    createdAt: at,
    updatedAt: at,
  }));
  const mapping: InstanceMapping = { instanceUuid: uuid, cellUuid, projectId: req.auth.projectId, userId: req.auth.userId, queuedForDelete: false, createdAt: at };
  const requestId = req.requestId;
  const execution = executionName('create', uuid);
  instance.operation = { kind: 'create', requestId, executionName: execution, params: { ...(host ? { host } : {}), ...(networkId ? { networkId } : { noNetwork: true }) }, holds: {}, startedAt: at };
  await createServerRecords(cell, instance, bdms, mapping, newAction(instance, 'create', requestId, at));
  await startExecution('server-create', execution, { serverId: uuid, requestId, cellUuid });
  return json(202, {
    server: { id: uuid, links: serverSummary(instance, linkContext(req)).links, 'OS-DCF:diskConfig': 'MANUAL', security_groups: [{ name: 'default' }], adminPass: randomUUID().replace(/-/g, '').slice(0, 12) },
  });
}

// ---------------------------------------------------------------------------------------------
// List / show / delete

async function listServers(req: ApiRequest, detail: boolean): Promise<ApiResponse> {
  const allTenants = req.query.has('all_tenants') && req.query.get('all_tenants') !== '0' && req.query.get('all_tenants') !== 'false';
  if (allTenants) authorize(req.auth, SERVER_POLICIES.allTenants, {});
  const name = req.query.get('name');
  const status = req.query.get('status')?.toUpperCase();
  const host = req.query.get('host');
  const nameRe = name ? new RegExp(name) : undefined;
  const all = (await listInstances())
    .filter((s) => !s.instance.hidden)
    .filter((s) => (allTenants ? true : s.instance.projectId === (req.query.get('project_id') && req.auth.isAdmin ? req.query.get('project_id') : req.auth.projectId)))
    .filter((s) => !nameRe || nameRe.test(s.instance.name))
    .filter((s) => !host || s.instance.host === host)
    .sort((a, b) => b.instance.createdAt.localeCompare(a.instance.createdAt));
  const views = [];
  for (const s of all) {
    if (!detail) {
      views.push(serverSummary(s.instance, linkContext(req)));
      continue;
    }
    const v = await detailOf(req, s);
    if (status && v.status !== status) continue;
    views.push(v);
  }
  return json(200, { servers: views });
}

async function deleteServer(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.delete, { projectId: server.instance.projectId });
  const i = server.instance;
  if (i.operation?.kind === 'delete') return json(204);
  if (i.locked && !req.auth.isAdmin) throw new Conflict(`Instance ${i.uuid} is locked`);
  // Nova deletes in any state but while deleting; a move in flight must first end (Ferry refuses
  // rather than racing its machine; Nova's delete of a VERIFY_RESIZE server confirms first).
  if (i.operation) throw new Conflict(`Cannot 'delete' instance ${i.uuid} while it is in task_state ${i.taskState ?? i.operation.kind}`);
  await beginOperation({
    server,
    auth: req.auth,
    kind: 'delete',
    action: 'delete',
    vmStates: ['active', 'building', 'stopped', 'paused', 'suspended', 'error', 'shelved', 'shelved_offloaded', 'soft-delete', 'rescued', 'resized'],
    taskStates: [null],
    taskState: 'deleting',
    machine: 'server-delete',
    requestId: req.requestId,
  });
  return json(204);
}

// ---------------------------------------------------------------------------------------------
// Actions

async function serverAction(req: ApiRequest): Promise<ApiResponse> {
  const body = req.body;
  if (!isObject(body) || Object.keys(body).length !== 1) throw new BadRequest('Malformed request body');
  const name = Object.keys(body)[0]!;
  const spec = SERVER_ACTIONS[name];
  const server = await visibleServer(req, req.params.server_id!);
  if (!spec || (spec.minVersion && !req.version.atLeast(spec.minVersion))) throw new NotFound('The resource could not be found.');
  authorize(req.auth, spec.policy, { projectId: server.instance.projectId });
  return spec.handler(req, server, body[name]);
}

function powerAction(kind: 'stop' | 'start' | 'reboot', action: string, vmStates: Instance['vmState'][], taskState: Instance['taskState']) {
  return async (req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> => {
    if (kind === 'reboot') {
      if (!isObject(args) || (args.type !== 'HARD' && args.type !== 'SOFT')) throw invalid('type', isObject(args) ? args.type : args, "is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']");
    }
    await beginOperation({ server, auth: req.auth, kind, action, vmStates, taskState, machine: 'server-power', requestId: req.requestId });
    return json(202);
  };
}

registerServerActions({
  'os-stop': { policy: SERVER_POLICIES.stop, handler: powerAction('stop', 'stop', ['active', 'error'], 'powering-off') },
  'os-start': { policy: SERVER_POLICIES.start, handler: powerAction('start', 'start', ['stopped'], 'powering-on') },
  reboot: { policy: SERVER_POLICIES.reboot, handler: powerAction('reboot', 'reboot', ['active', 'stopped', 'paused', 'suspended', 'error'], 'rebooting_hard') },
});

// ---------------------------------------------------------------------------------------------
// os-volume_attachments

async function listVolumeAttachments(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsIndex, { projectId: server.instance.projectId });
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  return json(200, { volumeAttachments: bdms.filter((b) => b.volumeId).map((b) => volumeAttachmentView(b, server.instance.uuid, req.version)) });
}

async function showVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsShow, { projectId: server.instance.projectId });
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const bdm = bdms.find((b) => b.volumeId === req.params.volume_id);
  if (!bdm) throw new NotFound(`Volume ${req.params.volume_id} is not attached to server ${server.instance.uuid}.`);
  return json(200, { volumeAttachment: volumeAttachmentView(bdm, server.instance.uuid, req.version) });
}

async function createVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsCreate, { projectId: server.instance.projectId });
  const body = req.body;
  if (!isObject(body) || !isObject(body.volumeAttachment)) throw invalid('volumeAttachment', isObject(body) ? body.volumeAttachment : body, "'volumeAttachment' is a required property");
  const va = body.volumeAttachment;
  const allowedKeys = ['volumeId', 'device', ...(req.version.atLeast('2.49') ? ['tag'] : []), ...(req.version.atLeast('2.79') ? ['delete_on_termination'] : [])];
  const extra = Object.keys(va).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid('volumeAttachment', va, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
  if (typeof va.volumeId !== 'string' || !isUuidLike(va.volumeId)) throw invalid('volumeId', va.volumeId, `${JSON.stringify(va.volumeId ?? null)} is not a 'uuid'`);
  const device = va.device === undefined || va.device === null ? null : String(va.device);
  if ((server.instance.vmState === 'shelved' || server.instance.vmState === 'shelved_offloaded') && !req.version.atLeast('2.20')) {
    throw new Conflict(`Cannot 'attach_volume' instance ${server.instance.uuid} while it is in vm_state ${server.instance.vmState}`);
  }
  const bdm = await attachVolume({
    server,
    auth: req.auth,
    requestId: req.requestId,
    volumeId: va.volumeId,
    device,
    tag: typeof va.tag === 'string' ? va.tag : null,
    deleteOnTermination: va.delete_on_termination === true,
  });
  return json(200, {
    volumeAttachment: volumeAttachmentCreateView({ volumeId: bdm.volumeId!, device: bdm.deviceName, tag: bdm.tag, deleteOnTermination: bdm.deleteOnTermination }, server.instance.uuid, req.version),
  });
}

async function updateVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  const oldVolumeId = req.params.volume_id!;
  const body = req.body;
  if (!isObject(body) || !isObject(body.volumeAttachment)) throw invalid('volumeAttachment', isObject(body) ? body.volumeAttachment : body, "'volumeAttachment' is a required property");
  const va = body.volumeAttachment;
  if (typeof va.volumeId !== 'string' || !isUuidLike(va.volumeId)) throw invalid('volumeId', va.volumeId, `${JSON.stringify(va.volumeId ?? null)} is not a 'uuid'`);
  const modern = req.version.atLeast('2.85');
  const allowedKeys = ['volumeId', ...(modern ? ['device', 'tag', 'serverId', 'id', 'delete_on_termination'] : [])];
  const extra = Object.keys(va).filter((k) => !allowedKeys.includes(k));
  if (extra.length) throw invalid('volumeAttachment', va, `Additional properties are not allowed (${extra.map((k) => `'${k}'`).join(', ')} ${extra.length === 1 ? 'was' : 'were'} unexpected)`);
  const swap = !modern || va.volumeId !== oldVolumeId;
  authorize(req.auth, swap ? SERVER_POLICIES.attachmentsSwap : SERVER_POLICIES.attachmentsUpdate, swap ? {} : { projectId: server.instance.projectId });
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  const bdm = bdms.find((b) => b.volumeId === oldVolumeId);
  if (!bdm) throw new NotFound(`Volume ${oldVolumeId} is not attached to server ${server.instance.uuid}.`);
  if (modern) {
    for (const [key, current] of [['device', bdm.deviceName], ['tag', bdm.tag], ['serverId', server.instance.uuid], ['id', oldVolumeId]] as const) {
      if (key in va && va[key] !== current) throw new BadRequest(`Updating '${key}' is not supported.`);
    }
  }
  const dot = modern && typeof va.delete_on_termination === 'boolean' ? va.delete_on_termination : undefined;
  if (!swap) {
    if (dot !== undefined) {
      await updateServer(server.cell, server.instance.uuid, ({ instance, bdms: current }) => ({
        instance,
        putBdms: current.filter((b) => b.uuid === bdm.uuid).map((b) => ({ ...b, deleteOnTermination: dot, updatedAt: now() })),
      }));
    }
    return json(202);
  }
  await swapVolume({ server, auth: req.auth, requestId: req.requestId, oldVolumeId, newVolumeId: va.volumeId, bdms, ...(dot !== undefined ? { deleteOnTermination: dot } : {}) });
  return json(202);
}

async function deleteVolumeAttachment(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.attachmentsDelete, { projectId: server.instance.projectId });
  if ((server.instance.vmState === 'shelved' || server.instance.vmState === 'shelved_offloaded') && !req.version.atLeast('2.20')) {
    throw new Conflict(`Cannot 'detach_volume' instance ${server.instance.uuid} while it is in vm_state ${server.instance.vmState}`);
  }
  const { bdms } = await loadPartition(server.cell, server.instance.uuid);
  await detachVolume({ server, auth: req.auth, requestId: req.requestId, volumeId: req.params.volume_id!, bdms });
  return json(202);
}

// ---------------------------------------------------------------------------------------------
// os-instance-actions, migrations, images

async function listActions(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.actionsList, { projectId: server.instance.projectId });
  const { actions } = await loadPartition(server.cell, server.instance.uuid);
  const viewer = { isAdmin: req.auth.isAdmin, instanceProjectId: server.instance.projectId };
  return json(200, { instanceActions: [...actions].reverse().map((a) => instanceActionView(a, req.version, viewer)) });
}

async function showAction(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.actionsShow, { projectId: server.instance.projectId });
  const { actions } = await loadPartition(server.cell, server.instance.uuid);
  const action = actions.find((a) => a.requestId === req.params.request_id);
  if (!action) throw new NotFound(`Action for request_id ${req.params.request_id} on instance ${server.instance.uuid} not found`);
  return json(200, { instanceAction: instanceActionDetailView(action, req.version, { isAdmin: req.auth.isAdmin, instanceProjectId: server.instance.projectId }) });
}

async function listAllMigrations(req: ApiRequest): Promise<ApiResponse> {
  const instanceUuid = req.query.get('instance_uuid');
  const status = req.query.get('status');
  const type = req.query.get('migration_type');
  const host = req.query.get('host');
  const all = (await listMigrations())
    .map((m) => m.migration)
    .filter((m) => !instanceUuid || m.instanceUuid === instanceUuid)
    .filter((m) => !status || m.status === status)
    .filter((m) => !type || m.migrationType === type)
    .filter((m) => !host || m.sourceCompute === host || m.destCompute === host)
    .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id - a.id);
  return json(200, { migrations: all.map((m) => migrationView(m, req.version, linkContext(req))) });
}

async function listServerMigrations(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  const inProgress = ['queued', 'preparing', 'running', 'post-migrating'];
  const all = (await listMigrations())
    .map((m) => m.migration)
    .filter((m) => m.instanceUuid === server.instance.uuid && m.migrationType === 'live-migration' && inProgress.includes(m.status));
  return json(200, { migrations: all.map((m) => serverMigrationView(m, req.version)) });
}

async function imagesIndex(req: ApiRequest, detail: boolean): Promise<ApiResponse> {
  const images = await listImages(req.auth.projectId, req.auth.isAdmin);
  const view = (i: Awaited<ReturnType<typeof listImages>>[number]) => ({
    id: i.id,
    name: i.name,
    links: [{ rel: 'self', href: `${req.baseUrl}/images/${i.id}` }],
    ...(detail ? { status: i.status.toUpperCase(), minDisk: i.minDisk, minRam: i.minRam, progress: 100, created: i.createdAt.replace(/\.\d+Z$/, 'Z'), updated: i.updatedAt.replace(/\.\d+Z$/, 'Z'), metadata: i.properties, 'OS-EXT-IMG-SIZE:size': i.sizeBytes } : {}),
  });
  return json(200, { images: images.map(view) });
}

async function imageShow(req: ApiRequest): Promise<ApiResponse> {
  const image = await getImage(req.params.image_id!).catch(() => undefined);
  if (!image || (image.visibility !== 'public' && image.ownerProjectId !== req.auth.projectId && !req.auth.isAdmin)) throw new NotFound('Image not found.');
  return json(200, {
    image: {
      id: image.id,
      name: image.name,
      status: image.status.toUpperCase(),
      minDisk: image.minDisk,
      minRam: image.minRam,
      progress: 100,
      metadata: image.properties,
      'OS-EXT-IMG-SIZE:size': image.sizeBytes,
      links: [{ rel: 'self', href: `${req.baseUrl}/images/${image.id}` }],
    },
  });
}

async function showServer(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.show, { projectId: server.instance.projectId });
  return json(200, { server: await detailOf(req, server) });
}

export const SERVER_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/servers', action: SERVER_POLICIES.index, handler: (req) => listServers(req, false) },
  { method: 'GET', path: '/servers/detail', action: SERVER_POLICIES.detail, handler: (req) => listServers(req, true) },
  { method: 'POST', path: '/servers', action: SERVER_POLICIES.create, handler: createServer },
  { method: 'GET', path: '/servers/{server_id}', action: SERVER_POLICIES.show, authorizeBy: 'resource', handler: showServer },
  { method: 'DELETE', path: '/servers/{server_id}', action: SERVER_POLICIES.delete, authorizeBy: 'resource', handler: deleteServer },
  { method: 'POST', path: '/servers/{server_id}/action', action: 'server action', authorizeBy: 'resource', handler: serverAction },
  { method: 'GET', path: '/servers/{server_id}/os-volume_attachments', action: SERVER_POLICIES.attachmentsIndex, authorizeBy: 'resource', handler: listVolumeAttachments },
  { method: 'POST', path: '/servers/{server_id}/os-volume_attachments', action: SERVER_POLICIES.attachmentsCreate, authorizeBy: 'resource', handler: createVolumeAttachment },
  { method: 'GET', path: '/servers/{server_id}/os-volume_attachments/{volume_id}', action: SERVER_POLICIES.attachmentsShow, authorizeBy: 'resource', handler: showVolumeAttachment },
  { method: 'PUT', path: '/servers/{server_id}/os-volume_attachments/{volume_id}', action: SERVER_POLICIES.attachmentsUpdate, authorizeBy: 'resource', handler: updateVolumeAttachment },
  { method: 'DELETE', path: '/servers/{server_id}/os-volume_attachments/{volume_id}', action: SERVER_POLICIES.attachmentsDelete, authorizeBy: 'resource', handler: deleteVolumeAttachment },
  { method: 'GET', path: '/servers/{server_id}/os-instance-actions', action: SERVER_POLICIES.actionsList, authorizeBy: 'resource', handler: listActions },
  { method: 'GET', path: '/servers/{server_id}/os-instance-actions/{request_id}', action: SERVER_POLICIES.actionsShow, authorizeBy: 'resource', handler: showAction },
  { method: 'GET', path: '/servers/{server_id}/migrations', action: SERVER_POLICIES.serverMigrationsIndex, handler: listServerMigrations },
  { method: 'GET', path: '/os-migrations', action: SERVER_POLICIES.migrationsIndex, handler: listAllMigrations },
  { method: 'GET', path: '/images', action: SERVER_POLICIES.imagesIndex, maxVersion: '2.35', handler: (req) => imagesIndex(req, false) },
  { method: 'GET', path: '/images/detail', action: SERVER_POLICIES.imagesIndex, maxVersion: '2.35', handler: (req) => imagesIndex(req, true) },
  { method: 'GET', path: '/images/{image_id}', action: SERVER_POLICIES.imagesIndex, maxVersion: '2.35', handler: imageShow },
];


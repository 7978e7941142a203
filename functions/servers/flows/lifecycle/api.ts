/**
 * The API half of boot, delete, stop, start and hard reboot: `POST /servers` (body checks in
 * Nova's order, the cell of the host the scheduler would pick, the records and the instance
 * action in one transaction, then server-create), `DELETE /servers/{id}` (server-delete) and the
 * `os-stop` / `os-start` / `reboot` actions (server-power). The steps are in steps.ts.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { json, type ApiRequest, type ApiResponse } from '../../../core/api.js';
import { BadRequest, Conflict, Forbidden } from '../../../core/errors.js';
import { executionName, startExecution } from '../../../core/executions.js';
import { authorize } from '../../../core/policy.js';
import { isUuidLike } from '../../../compute/model.js';
import { getCell, getFlavor, listCells } from '../../../compute/repo.js';
import { SANDBOX_NETWORK } from '../../../compute/seed.js';
import type { LinkContext } from '../../../compute/views.js';
import { invalid, isObject, noAdditional } from '../../../compute/validation.js';
import { POWER_STATE, ROOT_DEVICE_NAME } from '../../../drivers/compute/driver.js';
import type { ServerActionSpec } from '../../actions.js';
import type { Volume } from '../../../volumes/model.js';
import { requireVolumeConnectable } from '../../capabilities.js';
import { volumeGet } from '../../cinder.js';
import { assertNotLocked, assertStartedBy, beginOperation, computeNodes, consoleServerId } from '../../engine.js';
import { findImage } from '../../images.js';
import { newAction } from '../../instance-actions.js';
import { instanceFlavorOf, type BlockDeviceMapping, type Instance, type InstanceMapping } from '../../model.js';
import { SERVER_POLICIES, visibleServer } from '../../policies.js';
import { createServerRecords, type LoadedServer } from '../../repo.js';
import { candidates } from '../../scheduler.js';
import { serverSummary } from '../../views.js';
import { checkCreateBody, nameOf } from './create-body.js';

const now = () => new Date().toISOString();
const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });

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

export async function createServer(req: ApiRequest): Promise<ApiResponse> {
  const { server: s, counts } = checkCreateBody(req.body, req.version);
  const name = s.name as string;
  const bdmReqs = parseBdms(s.block_device_mapping_v2);
  // API._validate_and_build_base_options: a volume cannot go to several servers (checked on the counts asked, before any clipping).
  if ((positiveCount(s.min_count) > 1 || positiveCount(s.max_count) > 1) && bdmReqs.length) throw new BadRequest('Cannot attach one or more volumes to multiple instances');
  // A console start of server-create boots one server, named after its execution.
  if (req.startedAs && counts.count > 1) throw new BadRequest('A console start of server-create boots one server: min_count and max_count must be 1.');
  const bootVolume = bdmReqs.find((b) => b.bootIndex === 0);
  const imageRef = typeof s.imageRef === 'string' ? s.imageRef : '';
  if (!imageRef && !bootVolume) throw new BadRequest('Block Device Mapping is Invalid: Boot sequence for the instance and image/block device mapping combination is not valid.');
  // A flavor id is at most 255 characters (Nova's column); a longer one names no flavor (and is no valid DynamoDB key).
  const flavor = String(s.flavorRef).length > 255 ? undefined : await getFlavor(String(s.flavorRef));
  if (!flavor || flavor.disabled) throw new BadRequest('Invalid flavorRef provided.');
  if (imageRef) {
    const image = await findImage(imageRef);
    if (!image || image.status !== 'active' || (image.visibility !== 'public' && image.visibility !== 'community' && image.ownerProjectId !== req.auth.projectId && !req.auth.isAdmin)) {
      throw new BadRequest(`Image ${imageRef} could not be found.`);
    }
  }
  const volumes: Volume[] = [];
  for (const b of bdmReqs) {
    const v = await volumeGet(b.uuid);
    if (!v || (!req.auth.isAdmin && v.projectId !== req.auth.projectId)) throw new BadRequest(`Block Device Mapping is Invalid: failed to get volume ${b.uuid}.`);
    if (v.status !== 'available') throw new BadRequest(`Invalid volume: Volume ${b.uuid} status must be available, but current status is: ${v.status}`);
    volumes.push(v);
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

  if (host && !(await computeNodes()).some((n) => n.node.host === host)) throw new BadRequest(`Compute host ${host} could not be found.`);
  const checked: CheckedCreate = { name, flavor: instanceFlavorOf(flavor), imageRef, volumes, bdmReqs, networkId, az, host, metadata: s.metadata, keyName: s.key_name };
  // Several servers: each recorded and started on its own, named <name>-1..N, one reservation id for all.
  const reservationId = `r-${randomReservationChars()}`;
  const created: Instance[] = [];
  for (let index = 0; index < counts.count; index++) created.push(await createOne(req, checked, nameOf(name, index, counts.count), reservationId));
  if (counts.returnReservationId) return json(202, { reservation_id: reservationId });
  const first = created[0]!;
  return json(202, {
    server: { id: first.uuid, links: serverSummary(first, linkContext(req)).links, 'OS-DCF:diskConfig': 'MANUAL', security_groups: [{ name: 'default' }], adminPass: randomUUID().replace(/-/g, '').slice(0, 12) },
  });
}

/** min_count / max_count as the body gave them (checked already), 1 when absent. */
const positiveCount = (raw: unknown): number => (raw === undefined ? 1 : Number(raw));

/** utils.generate_uid('r'): 8 characters of Nova's alphabet. */
function randomReservationChars(): string {
  const alphabet = '0123456789abcdefghijklmnopqrstuvwxyz';
  return Array.from(randomBytes(8), (b) => alphabet[b % alphabet.length]).join('');
}

/** What every server of one request shares, checked once. */
interface CheckedCreate {
  name: string;
  flavor: Instance['flavor'];
  imageRef: string;
  volumes: Volume[];
  bdmReqs: BdmRequest[];
  networkId: string | null;
  az: string | null;
  host: string | undefined;
  metadata: unknown;
  keyName: unknown;
}

/** One server of the request: its cell, its records and the instance action in one transaction, then server-create. */
async function createOne(req: ApiRequest, c: CheckedCreate, displayName: string, reservationId: string): Promise<Instance> {
  const { flavor, imageRef, volumes, bdmReqs, networkId, az, host } = c;
  const s = { metadata: c.metadata, key_name: c.keyName };
  // Nova's conductor creates the instance in the cell of the host the scheduler picked. Ferry
  // records the instance (in its cell's table) before the machine runs, so the API asks the
  // scheduler's filters and weighers which host would win now and takes that host's cell; the
  // machine then claims on a host of that cell. With no candidate the boot goes to the first cell
  // and fails there with NoValidHost (ERROR), as in Nova.
  // A console start of server-create names the server after its execution, so a re-run of its
  // Record step finds the server the first run recorded instead of booting a second one.
  if (req.startedAs) assertStartedBy(req.startedAs, 'server-create');
  const uuid = req.startedAs ? consoleServerId(req.startedAs) : randomUUID();
  const best = (await candidates({ flavor, consumer: uuid, volumeBacked: !imageRef, host, availabilityZone: az }))[0];
  // The volumes must be connectable where the boot will run (capabilities checked before anything is written).
  if (best) for (const v of volumes) await requireVolumeConnectable(best.node.host, v);
  const cellUuid = best?.cell.uuid ?? (await listCells())[0]!.uuid;
  const cell = (await getCell(cellUuid))!;

  const at = now();
  const instance: Instance = {
    uuid,
    name: displayName,
    projectId: req.auth.projectId,
    userId: req.auth.userId,
    flavor,
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
    systemMetadata: { reservation_id: reservationId, ...(imageRef ? { image_base_image_ref: imageRef } : {}) },
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
  const execution = req.startedAs?.executionName ?? executionName('create', uuid);
  instance.operation = { kind: 'create', requestId, executionName: execution, params: { ...(host ? { host } : {}), ...(networkId ? { networkId } : { noNetwork: true }) }, holds: {}, startedAt: at };
  await createServerRecords(cell, instance, bdms, mapping, newAction(instance, 'create', requestId, at));
  // A console start is the execution: its next states boot the server.
  if (!req.startedAs) await startExecution('server-create', execution, { serverId: uuid, requestId, cellUuid });
  return instance;
}

// ---------------------------------------------------------------------------------------------
// Delete

export async function deleteServer(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.delete, { projectId: server.instance.projectId });
  const i = server.instance;
  if (i.operation?.kind === 'delete') return json(204);
  assertNotLocked(i, req.auth.isAdmin);
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
    startedAs: req.startedAs,
  });
  return json(204);
}

// ---------------------------------------------------------------------------------------------
// Power actions

const REBOOT_TYPES = ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft'];

function powerAction(kind: 'stop' | 'start' | 'reboot', action: string, vmStates: Instance['vmState'][], taskState: Instance['taskState']) {
  return async (req: ApiRequest, server: LoadedServer, args: unknown): Promise<ApiResponse> => {
    // os-stop and os-start take any value (Nova's schema `{}`); reboot's is an object with only a
    // type of the six spellings Nova's enum lists (it upper-cases it).
    if (kind === 'reboot') {
      if (!isObject(args)) throw invalid('reboot', args, `${JSON.stringify(args)} is not of type 'object'`);
      if (!('type' in args)) throw invalid('reboot', args, "'type' is a required property");
      noAdditional('reboot', args, ['type']);
      if (!REBOOT_TYPES.includes(args.type as string)) throw invalid('type', args.type, `${JSON.stringify(args.type)} is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']`);
    }
    await beginOperation({ server, auth: req.auth, kind, action, vmStates, taskState, machine: 'server-power', requestId: req.requestId, startedAs: req.startedAs });
    return json(202);
  };
}

export const LIFECYCLE_ACTIONS: Record<string, ServerActionSpec> = {
  'os-stop': { policy: SERVER_POLICIES.stop, handler: powerAction('stop', 'stop', ['active', 'error'], 'powering-off') },
  'os-start': { policy: SERVER_POLICIES.start, handler: powerAction('start', 'start', ['stopped'], 'powering-on') },
  reboot: { policy: SERVER_POLICIES.reboot, handler: powerAction('reboot', 'reboot', ['active', 'stopped', 'paused', 'suspended', 'error'], 'rebooting_hard') },
};

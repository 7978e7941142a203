/**
 * os-services (list; PUT by uuid from 2.53, the enable/disable/force-down actions before) and
 * os-availability-zone (availability_zone.py: the zones of the enabled and disabled services).
 * A compute service no longer forced down plays a nova-compute restart (the ComputeHostRestart
 * port, compute/ports.ts).
 */
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { BadRequest, NotFound } from '../core/errors.js';
import { logger } from '../core/logger.js';
import { authorize } from '../core/policy.js';
import { isUp, servicesWithLiveness, upOf } from './liveness.js';
import { COMPUTE_BINARY, isUuidLike, parseStrictBool, type ServiceUpdate } from './model.js';
import { COMPUTE_POLICIES } from './policies.js';
import { getComputeHostRestart } from './ports.js';
import { findServiceByHostBinary, findServiceByUuid, updateService } from './repo.js';
import { availabilityZoneOf, novaTime, SERVICE_FORCED_DOWN_MIN, serviceView, UUID_FOR_ID_MIN } from './views.js';
import { invalid, noAdditional, requireBodyObject, requireString, type Json } from './validation.js';

/** 2.53+: `PUT /os-services/{service_id}` with `status`, `disabled_reason`, `forced_down` (services.py `_update_v253`). */
async function updateV253(req: ApiRequest) {
  const body = requireBodyObject(req.body);
  noAdditional('body', body, ['status', 'disabled_reason', 'forced_down']);
  if (body.status !== undefined && body.status !== 'enabled' && body.status !== 'disabled') {
    throw invalid('status', body.status, `${JSON.stringify(body.status)} is not one of ['enabled', 'disabled']`);
  }
  if (body.disabled_reason !== undefined) {
    const r = body.disabled_reason;
    if (typeof r !== 'string') throw invalid('disabled_reason', r, `${JSON.stringify(r)} is not of type 'string'`);
    if (r.length < 1) throw invalid('disabled_reason', r, `'' is too short`);
    if (r.length > 255) throw invalid('disabled_reason', r, `'${r}' is too long`);
  }
  const forcedDown = body.forced_down === undefined ? undefined : parseStrictBool(body.forced_down, 'forced_down');
  authorize(req.auth, COMPUTE_POLICIES.servicesUpdate);

  const id = req.params.service_id!;
  if (!isUuidLike(id)) throw new BadRequest(`Invalid uuid ${id}`);
  const found = await findServiceByUuid(id.toLowerCase());
  if (!found) throw new NotFound(`Service ${id} could not be found.`);
  const status = body.status as 'enabled' | 'disabled' | undefined;
  const reason = body.disabled_reason as string | undefined;
  if (status === 'enabled' && reason) throw new BadRequest("Specifying 'disabled_reason' with status 'enabled' is invalid.");
  if (found.value.binary !== COMPUTE_BINARY) {
    throw new BadRequest(`Updating a ${found.value.binary} service is not supported. Only nova-compute services can be updated.`);
  }
  const update: ServiceUpdate = {};
  if (status !== undefined) {
    update.status = status;
    update.disabledReason = reason ?? null;
  }
  if (forcedDown !== undefined) update.forcedDown = forcedDown;
  if (Object.keys(update).length === 0) throw new BadRequest("No updates were requested. Fields 'status' or 'forced_down' should be specified.");
  const saved = await updateService(found.cell, found.value.uuid, update);
  if (update.forcedDown === false) await afterComputeBack(saved.host);
  const view = serviceView(saved, await upOf({ cell: found.cell, value: saved }), req.version);
  return json(200, { service: view });
}

/** Before 2.53: `PUT /os-services/{enable|disable|disable-log-reason|force-down}` with host and binary. */
async function updateByAction(req: ApiRequest) {
  const action = req.params.service_id!;
  const known = ['enable', 'disable', 'disable-log-reason', ...(req.version.atLeast(SERVICE_FORCED_DOWN_MIN) ? ['force-down'] : [])];
  if (!known.includes(action)) throw new NotFound('Unknown action');
  const body = requireBodyObject(req.body);
  const host = requireString('body', body, 'host');
  const binary = requireString('body', body, 'binary');
  let update: ServiceUpdate;
  let out: Json;
  switch (action) {
    case 'enable':
      update = { status: 'enabled', disabledReason: null };
      out = { host, binary, status: 'enabled' };
      break;
    case 'disable':
      update = { status: 'disabled', disabledReason: null };
      out = { host, binary, status: 'disabled' };
      break;
    case 'disable-log-reason': {
      const reason = requireString('body', body, 'disabled_reason');
      update = { status: 'disabled', disabledReason: reason };
      out = { host, binary, status: 'disabled', disabled_reason: reason };
      break;
    }
    default: {
      if (body.forced_down === undefined) throw invalid('body', body, "'forced_down' is a required property");
      const forced = parseStrictBool(body.forced_down, 'forced_down');
      update = { forcedDown: forced };
      out = { host, binary, forced_down: forced };
    }
  }
  authorize(req.auth, COMPUTE_POLICIES.servicesUpdate);
  const found = await findServiceByHostBinary(host, binary);
  if (!found) throw new NotFound(`Could not find binary ${binary} on host ${host}.`);
  await updateService(found.cell, found.value.uuid, update);
  if (update.forcedDown === false) await afterComputeBack(host);
  return json(200, { service: out });
}

/**
 * A compute service no longer forced down plays a nova-compute restart: guests evacuated away
 * from the host while it was down are destroyed there (`_destroy_evacuated_instances`). Best
 * effort: the service update itself succeeded, so a failed clean-up is logged with what it left
 * (the guests stay on the host, and the audit lists them until a later restart cleans them).
 */
async function afterComputeBack(host: string): Promise<void> {
  // Outside the try: a missing registration is Ferry's wiring, not a clean-up that failed.
  const restart = getComputeHostRestart();
  try {
    await restart.cleanupEvacuatedGuests(host);
  } catch (e) {
    logger.warn('could not clean evacuated guests on a compute host back up; they stay there until its next restart', { host, error: e as Error });
  }
}

export const serviceRoutes: RouteSpec[] = [
  {
    method: 'GET',
    path: '/os-services',
    action: COMPUTE_POLICIES.servicesList,
    handler: async (req) => {
      const host = req.query.get('host');
      const binary = req.query.get('binary');
      const { services, reporting } = await servicesWithLiveness();
      const shown = services.filter((s) => (host === null || s.value.host === host) && (binary === null || s.value.binary === binary));
      return json(200, { services: shown.map((s) => serviceView(s.value, isUp(s.value, reporting), req.version)) });
    },
  },
  { method: 'PUT', path: '/os-services/{service_id}', action: COMPUTE_POLICIES.servicesUpdate, authorizeBy: 'resource', minVersion: UUID_FOR_ID_MIN, handler: updateV253 },
  { method: 'PUT', path: '/os-services/{service_id}', action: COMPUTE_POLICIES.servicesUpdate, authorizeBy: 'resource', maxVersion: '2.52', handler: updateByAction },
];

// ---------------------------------------------------------------------------------------------
// os-availability-zone: zones of the enabled and disabled services

export const availabilityZoneRoutes: RouteSpec[] = [
  {
    method: 'GET',
    path: '/os-availability-zone',
    action: COMPUTE_POLICIES.azList,
    handler: async () => {
      const { services } = await servicesWithLiveness();
      const zones = new Map<string, boolean>();
      for (const s of services) {
        const zone = availabilityZoneOf(s.value);
        if (zone === 'internal') continue;
        zones.set(zone, (zones.get(zone) ?? false) || !s.value.disabled);
      }
      return json(200, { availabilityZoneInfo: [...zones].map(([zoneName, available]) => ({ zoneName, zoneState: { available }, hosts: null })) });
    },
  },
  {
    method: 'GET',
    path: '/os-availability-zone/detail',
    action: COMPUTE_POLICIES.azDetail,
    handler: async () => {
      const { services, reporting } = await servicesWithLiveness();
      const zones = new Map<string, { available: boolean; hosts: Record<string, Record<string, Json>> }>();
      for (const s of services) {
        const zone = availabilityZoneOf(s.value);
        const z = zones.get(zone) ?? { available: false, hosts: {} };
        z.available ||= !s.value.disabled;
        (z.hosts[s.value.host] ??= {})[s.value.binary] = { available: isUp(s.value, reporting), active: !s.value.disabled, updated_at: novaTime(s.value.updatedAt) };
        zones.set(zone, z);
      }
      return json(200, { availabilityZoneInfo: [...zones].map(([zoneName, z]) => ({ zoneName, zoneState: { available: z.available }, hosts: z.hosts })) });
    },
  },
];

/**
 * The audit of volumes (Cinder): pools' capacity against their volumes, backend-object claims,
 * what each backend really holds (volumes, host connections, snapshots) against the records,
 * attachments against their volumes, and replication operations and drills.
 */
import { ATTACH_WAIT_MACHINE, liveItemWait, liveWait } from '../attachments/attach-wait.js';
import { attachmentFromItem, attachmentOf, connectIntentsOf, type Attachment } from '../attachments/model.js';
import { MACHINE_WORST_CASE_SECONDS } from '../core/machine-bounds.js';
import { scanAll } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig, BackendConnection, BackendVolume } from '../drivers/volume/driver.js';
import { driverFor, isSnapshotDriver } from '../drivers/volume/registry.js';
import type { DrillState } from '../replication/service-repo.js';
import type { Snapshot } from '../snapshots/model.js';
import { backendOf, listBackendRecords } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';
import type { Find } from './findings.js';
import { auditUnownedReplicas } from './replica-unowned.js';

/** Statuses an operation passes through; a volume should not stay in one for long. */
const TRANSITIONAL = new Set(['creating', 'deleting', 'managing', 'extending', 'reserved', 'attaching', 'detaching', 'retyping', 'downloading', 'uploading']);
/** Statuses in which the backend object must exist. */
const MUST_EXIST_ON_BACKEND = new Set(['available', 'in-use', 'reserved', 'attaching', 'detaching', 'extending', 'maintenance']);
/** Snapshot statuses an operation passes through. */
const SNAPSHOT_TRANSITIONAL = new Set(['creating', 'deleting']);
/** Ferry's own snapshot names on a backend (Cinder's snapshot_name_template). */
const FERRY_SNAPSHOT_NAME = /^snapshot-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Ferry's own backend object names; anything else on a backend is an operator's unmanaged volume. */
const FERRY_NAME = /^volume-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;


function stripKeys<T>(item: Record<string, unknown>): T {
  const { pk: _pk, sk: _sk, gsi1pk: _g1, gsi1sk: _g2, ...rest } = item;
  return rest as T;
}

export interface VolumeAudit {
  checked: Record<string, number>;
  /** Live attachments by id: the servers' audit checks them against the BDMs. */
  liveAttachments: Map<string, Attachment>;
}

export async function auditVolumes(now: number, stuckMs: number, find: Find): Promise<VolumeAudit> {

  const items = await scanAll({ TableName: tableName('volume'), ConsistentRead: true });
  const volumes = items.filter((i) => i.sk === 'VOL').map((i) => stripKeys<Volume>(i));
  const volumesById = new Map(volumes.map((v) => [v.id, v]));
  // Each attachment's state as readers see it (its volume's full-state summary over the item), from
  // the same Scan; an item its volume does not list stays as it is (the orphan check finds it).
  const attachmentItems = items.filter((i) => i.sk === 'ATT').map((i) => attachmentFromItem(i)).map((a) => attachmentOf(a, volumesById.get(a.volumeId)?.attachments?.[a.id]));
  const liveAttachments = new Map<string, Attachment>(attachmentItems.filter((a) => !a.deleted).map((a) => [a.id, a]));
  const unmanagedMarkers = new Set(items.filter((i) => String(i.pk).startsWith('UNMANAGED#')).map((i) => `${String(i.pk).slice('UNMANAGED#'.length)} ${String(i.sk)}`));

  // Pool capacity: each pool's allocation is exactly what its volumes hold.
  const heldByPool = new Map<string, number>();
  for (const v of volumes) if (v.capacity) heldByPool.set(v.capacity.pool, (heldByPool.get(v.capacity.pool) ?? 0) + v.capacity.gb);
  const pools = items.filter((i) => String(i.pk).startsWith('POOL#'));
  for (const p of pools) {
    const pool = String(p.pk).slice('POOL#'.length);
    const allocated = Number(p.allocatedGb ?? 0);
    const held = heldByPool.get(pool) ?? 0;
    if (allocated !== held) find('capacity-mismatch', `pool ${pool}`, `allocated ${allocated} GiB, its volumes hold ${held} GiB`);
    if (p.totalGb !== undefined && allocated > Number(p.totalGb)) find('capacity-overcommitted', `pool ${pool}`, `allocated ${allocated} GiB of ${p.totalGb} GiB`);
    heldByPool.delete(pool);
  }
  for (const [pool, held] of heldByPool) find('capacity-mismatch', `pool ${pool}`, `volumes hold ${held} GiB on a pool with no allocation record`);

  // Backend-object claims: one per volume that has a backend object, none without.
  const claims = new Map(items.filter((i) => String(i.pk).startsWith('BACKOBJ#')).map((i) => [`${String(i.pk).slice('BACKOBJ#'.length)} ${String(i.sk)}`, String(i.volumeId)]));
  for (const [object, volumeId] of claims) {
    const v = volumesById.get(volumeId);
    if (!v || !v.host || `${backendOf(v.host)} ${v.backendName}` !== object) find('orphan-claim', `backend object ${object}`, `claimed by volume ${volumeId}, which does not hold it`);
  }
  for (const v of volumes) {
    if (v.host && MUST_EXIST_ON_BACKEND.has(v.status) && claims.get(`${backendOf(v.host)} ${v.backendName}`) !== v.id) {
      find('missing-claim', `volume ${v.id}`, `its backend object ${v.backendName} on ${backendOf(v.host)} is not claimed by it`);
    }
  }

  // What each backend really holds — on the site it runs on (after a failover: the target).
  const backends = await listBackendRecords();
  const held = new Map<string, { config: BackendConfig; volumes: Map<string, BackendVolume>; connections: BackendConnection[]; snapshots?: Set<string> }>();
  for (const { config, service } of backends) {
    const driver = driverFor(config, service.activeBackendId);
    try {
      const [vols, conns, snaps] = await Promise.all([driver.listVolumes(), driver.listConnections(), isSnapshotDriver(driver) ? driver.listSnapshots() : undefined]);
      held.set(config.host, {
        config,
        volumes: new Map(vols.map((v) => [v.backendName, v])),
        connections: conns,
        snapshots: snaps && new Set(snaps.map((x) => `${x.backendName} ${x.snapshotName}`)),
      });
    } catch (e) {
      find('backend-unreadable', config.host, `the driver could not list the backend: ${(e as Error).message}`);
    }
  }

  // What replication made on the sites the backends do not run on, that nothing holds (replica-unowned.ts).
  const siteVolumes = await auditUnownedReplicas(items, backends, now, find);

  // Snapshots: each listed on its volume and the volume's list complete; an available one on its backend; none stuck.
  const snapshots = items.filter((i) => i.sk === 'SNAP').map((i) => stripKeys<Snapshot>(i));
  const snapshotsById = new Map(snapshots.map((x) => [x.id, x]));
  const knownSnapshots = new Set(snapshots.map((x) => `${x.backendHost} ${x.volumeBackendName} ${x.backendName}`));
  for (const snap of snapshots) {
    const resource = `snapshot ${snap.id}`;
    const v = volumesById.get(snap.volumeId);
    if (!v) find('orphan-snapshot', resource, `its volume ${snap.volumeId} does not exist`);
    else if (!(v.snapshotIds ?? []).includes(snap.id)) find('snapshot-mismatch', resource, `volume ${snap.volumeId} does not list it`);
    const onBackend = held.get(snap.backendHost);
    if (snap.status === 'available' && onBackend?.snapshots && !onBackend.snapshots.has(`${snap.volumeBackendName} ${snap.backendName}`)) {
      find('missing-backend-snapshot', resource, `available but ${snap.backendHost} has no snapshot ${snap.backendName} of ${snap.volumeBackendName}`);
    }
    if (SNAPSHOT_TRANSITIONAL.has(snap.status) && now - Date.parse(snap.updatedAt) > stuckMs) find('stuck-snapshot', resource, `${snap.status} since ${snap.updatedAt}`);
  }
  for (const v of volumes) {
    for (const id of v.snapshotIds ?? []) if (!snapshotsById.has(id)) find('dangling-snapshot', `volume ${v.id}`, `lists snapshot ${id} that does not exist`);
  }
  for (const [host, b] of held) {
    for (const entry of b.snapshots ?? []) {
      const [volumeName, snapshotName] = entry.split(' ');
      if (FERRY_SNAPSHOT_NAME.test(snapshotName!) && !knownSnapshots.has(`${host} ${volumeName} ${snapshotName}`) && !unmanagedMarkers.has(`${host} ${volumeName} ${snapshotName}`)) {
        find('orphan-backend-snapshot', `${host} ${volumeName}`, `snapshot ${snapshotName} has no snapshot record`);
      }
    }
  }

  // Replication: a service failing over has a running operation; a drill's copies belong to its
  // current drill; no operation or drill stays in flight for long.
  const operations = new Map(items.filter((i) => String(i.pk).startsWith('REPLOP#') && i.sk === 'OP').map((i) => [String(i.id), i]));
  const backendItems = items.filter((i) => String(i.pk).startsWith('BACKEND#'));
  const currentDrills = new Set<string>();
  for (const b of backendItems) {
    const host = String(b.pk).slice('BACKEND#'.length);
    const service = b.service as { replicationStatus?: string } | undefined;
    const opId = b.failoverOperationId as string | undefined;
    if (service?.replicationStatus === 'failing-over') {
      const op = opId ? operations.get(opId) : undefined;
      if (!op || op.status !== 'running') find('failover-without-operation', `service ${host}`, `failing-over, but its operation ${opId ?? '(none)'} is ${op ? String(op.status) : 'missing'}`);
    }
    const drill = b.drill as DrillState | undefined;
    if (drill) {
      currentDrills.add(drill.operationId);
      if (!operations.has(drill.operationId)) find('drill-without-operation', `service ${host}`, `drill ${drill.operationId} (${drill.status}) has no operation record`);
    }
  }
  for (const i of items) {
    if (!String(i.pk).startsWith('REPLOP#') || !String(i.sk).startsWith('COPIES#')) continue;
    const drillId = String(i.pk).slice('REPLOP#'.length);
    if (!currentDrills.has(drillId)) find('orphan-drill-copies', `drill ${drillId}`, `${(i.copies as unknown[] | undefined)?.length ?? 0} drill copies recorded for a drill that has ended`);
  }
  // What a failover brought up for volumes deleted meanwhile and could not remove (replication/failover-discard.ts).
  for (const i of items.filter((x) => String(x.pk).startsWith('REPLOP#') && String(x.sk).startsWith('LEFT#'))) {
    const left = (i.replicas as { targetBackendId: string; location: string }[] | undefined) ?? [];
    const operationId = String(i.pk).slice('REPLOP#'.length);
    find('failover-replica-left', `failover ${operationId}`, `left on the target: ${left.map((r) => `${r.targetBackendId} ${r.location}`).join(', ')} (${String(i.error)})`, { operationId, sk: String(i.sk) });
  }
  for (const op of operations.values()) {
    if (op.status === 'running' && now - Date.parse(String(op.updatedAt)) > stuckMs) find('stuck-operation', `replication operation ${String(op.id)}`, `${String(op.kind)} of ${String(op.host)} running since ${String(op.updatedAt)}`);
  }

  // A delete by id in flight may have cut its host's connection before its transaction
  // (attachments/removal-by-id.ts): until its intent expires that is no missing connection.
  const disconnecting = new Set<string>();
  for (const a of attachmentItems) {
    if (a.attachedHost && Object.values(a.pendingDisconnect ?? {}).some((i) => Date.parse(i.expiresAt) >= now)) disconnecting.add(`${a.volumeId} ${a.attachedHost}`);
  }

  const knownBackendNames = new Map<string, Set<string>>(); // backend host -> backend names DynamoDB knows
  for (const v of volumes) {
    const resource = `volume ${v.id}`;
    if (v.host) {
      const backend = backendOf(v.host);
      if (!knownBackendNames.has(backend)) knownBackendNames.set(backend, new Set());
      knownBackendNames.get(backend)!.add(v.backendName);
      const onBackend = held.get(backend);
      if (onBackend && MUST_EXIST_ON_BACKEND.has(v.status)) {
        const obj = onBackend.volumes.get(v.backendName);
        if (!obj) find('missing-backend-volume', resource, `status ${v.status} but ${backend} has no object ${v.backendName}`);
        else if (obj.sizeGb !== v.size) find('size-mismatch', resource, `DynamoDB says ${v.size} GiB, ${backend} holds ${obj.sizeGb} GiB`);
      }
    }

    // Attachment summaries on the volume against the attachment items.
    const summaries = Object.entries(v.attachments ?? {});
    const instanceCounts: Record<string, number> = {};
    for (const [id, s] of summaries) {
      const a = liveAttachments.get(id);
      if (!a) {
        find('dangling-attachment', resource, `lists attachment ${id} (${s.status}) that does not exist`);
        continue;
      }
      if (a.volumeId !== v.id) find('attachment-mismatch', `attachment ${id}`, `belongs to volume ${a.volumeId} but is listed on ${v.id}`);
      if (a.attachStatus !== s.status) find('attachment-mismatch', `attachment ${id}`, `status ${a.attachStatus}, the volume says ${s.status}`);
      if (s.instanceUuid) instanceCounts[s.instanceUuid] = (instanceCounts[s.instanceUuid] ?? 0) + 1;
      if (TRANSITIONAL.has(a.attachStatus) && now - Date.parse(a.updatedAt) > stuckMs) {
        find('stuck-attachment', `attachment ${id}`, `${a.attachStatus} since ${a.updatedAt}`);
      }
    }
    const recorded = Object.fromEntries(Object.entries(v.instances ?? {}).filter(([, n]) => n > 0));
    if (JSON.stringify(sortKeys(recorded)) !== JSON.stringify(sortKeys(instanceCounts))) {
      find('instances-mismatch', resource, `instances ${JSON.stringify(recorded)}, attachments say ${JSON.stringify(instanceCounts)}`);
    }

    // Volume status against its attachments.
    const active = summaries.filter(([, s]) => !s.status.startsWith('error'));
    if (active.length === 0 && ['reserved', 'attaching', 'in-use'].includes(v.status)) {
      find('status-mismatch', resource, `status ${v.status} with no attachment`);
    }
    if (active.length > 0 && ['available', 'creating', 'deleting'].includes(v.status)) {
      find('status-mismatch', resource, `status ${v.status} with ${active.length} attachment(s)`);
    }
    if (TRANSITIONAL.has(v.status) && now - Date.parse(v.updatedAt) > stuckMs) {
      find('stuck-volume', resource, `${v.status} since ${v.updatedAt}`);
    }

    // Host connections: every user is a connected attachment on that host, and the backend has the export.
    for (const [host, users] of Object.entries(v.connections ?? {})) {
      for (const id of users) {
        const s = v.attachments?.[id];
        if (!s || s.host !== host || !s.connected) find('connection-user-mismatch', resource, `connection on ${host} lists attachment ${id}, which is not connected there`);
      }
      if (users.length > 0 && v.host) {
        const onBackend = held.get(backendOf(v.host));
        if (onBackend && !disconnecting.has(`${v.id} ${host}`) && !onBackend.connections.some((c) => c.backendName === v.backendName && c.host === host)) {
          find('missing-host-connection', resource, `${users.length} attachment(s) use host ${host}, but ${backendOf(v.host)} has no connection there`);
        }
      }
    }
    for (const [id, s] of summaries) {
      if (s.connected && s.host && !(v.connections?.[s.host] ?? []).includes(id)) {
        find('connection-user-mismatch', resource, `attachment ${id} is connected on ${s.host} but not counted in that host's connection`);
      }
    }
  }

  // Attachment items with no volume that lists them.
  for (const a of liveAttachments.values()) {
    const v = volumesById.get(a.volumeId);
    if (!v) find('orphan-attachment', `attachment ${a.id}`, `its volume ${a.volumeId} does not exist`);
    else if (!v.attachments?.[a.id]) find('orphan-attachment', `attachment ${a.id}`, `volume ${a.volumeId} does not list it`);
  }
  for (const a of attachmentItems) {
    if (a.deleted && a.disconnect) {
      const v = volumesById.get(a.volumeId);
      const backend = v?.host ? held.get(backendOf(v.host)) : undefined;
      // A later attachment connected on the same host uses the connection again: nothing pending.
      const reused = (v?.connections?.[a.disconnect.host] ?? []).length > 0;
      if (!reused && backend?.connections.some((c) => c.backendName === v!.backendName && c.host === a.disconnect!.host)) {
        find('pending-disconnect', `attachment ${a.id}`, `deleted, but the connection on ${a.disconnect.host} it had to remove is still there`, { attachmentId: a.id, volumeId: a.volumeId, host: a.disconnect.host });
      }
    }
  }

  // Connect intents (attachments/model.ts): one past its expiry belongs to a call that died. On
  // the volume's `connectIntents`; on attachment items' `pendingConnect` if written before they moved.
  const connecting = new Set<string>();
  const intents = [
    ...volumes.flatMap((v) => Object.values(connectIntentsOf(v)).map((intent) => ({ volumeId: v.id, attachmentId: intent.attachmentId, intent }))),
    ...attachmentItems.flatMap((a) => Object.values(a.pendingConnect ?? {}).map((intent) => ({ volumeId: a.volumeId, attachmentId: a.id, intent }))),
  ];
  for (const { volumeId, attachmentId, intent } of intents) {
    connecting.add(`${volumeId} ${intent.host}`);
    if (Date.parse(intent.expiresAt) < now) {
      find('pending-connect', `attachment ${attachmentId}`, `a connect to host ${intent.host} begun ${intent.startedAt} never finished (its intent expired ${intent.expiresAt})`, { attachmentId, volumeId, host: intent.host });
    }
  }

  // Disconnect intents of deletes by id: one past its expiry belongs to a call that died, maybe
  // after cutting the connection (the reconciler makes it again while the volume records it).
  for (const a of attachmentItems) {
    for (const intent of Object.values(a.pendingDisconnect ?? {})) {
      if (Date.parse(intent.expiresAt) < now) {
        find('pending-disconnect', `attachment ${a.id}`, `a delete begun ${intent.startedAt} that may have cut the connection on ${a.attachedHost ?? 'None'} never finished (its intent expired ${intent.expiresAt})`, { attachmentId: a.id, volumeId: a.volumeId, host: a.attachedHost ?? '' });
      }
    }
  }

  // Attach waits (attachments/attach-wait.ts) nothing ended: the reconciler starts a wait's machine
  // that never started, repairs one whose execution ended and retries a pending detach
  // (attach-wait-recovery.ts); what remains is here. A wait counts as stuck only past its machine's
  // worst case (3.8 hours, infra/asl/policy.ts ATTACH_WAIT): before that its execution may still run.
  const attachWaitStuckMs = Math.max(stuckMs, MACHINE_WORST_CASE_SECONDS[ATTACH_WAIT_MACHINE] * 1000);
  // The waits are in the volumes' attachWaits; an attachment item written before that map may still hold its own (liveItemWait).
  const waits = [
    ...volumes.flatMap((v) => Object.entries(v.attachWaits ?? {}).map(([id, wait]) => ({ id, wait, live: liveWait(v, id) !== undefined }))),
    ...attachmentItems.filter((a) => a.attachWait).map((a) => ({ id: a.id, wait: a.attachWait!, live: liveItemWait(a) !== undefined })),
  ];
  for (const { id, wait, live } of waits) {
    if (live && now - Date.parse(wait.startedAt) > attachWaitStuckMs) {
      find('stuck-attach-wait', `attachment ${id}`, `the attach to ${wait.host} has been waited for since ${wait.startedAt} (execution ${wait.execution})`);
    }
    if (wait.status === 'failed' && wait.detachPending) {
      find('attach-wait-detach-pending', `attachment ${id}`, `the attach to ${wait.host} failed ${wait.endedAt} (${wait.reason}); what the backend holds of it was not removed (execution ${wait.execution})`);
    }
  }

  // What the backends hold that DynamoDB does not know.
  let unmanaged = 0;
  for (const [host, b] of held) {
    const known = knownBackendNames.get(host) ?? new Set<string>();
    for (const name of b.volumes.keys()) {
      if (known.has(name)) continue;
      if (FERRY_NAME.test(name) && !unmanagedMarkers.has(`${host} ${name}`)) find('orphan-backend-volume', `${host} ${name}`, 'a Ferry volume object with no volume record');
      else unmanaged++;
    }
    for (const c of b.connections) {
      const v = volumes.find((x) => x.backendName === c.backendName && x.host && backendOf(x.host) === host);
      // A connect's intent names the export it is making (or, expired, is reported above).
      if (v && connecting.has(`${v.id} ${c.host}`)) continue;
      if (!v || (v.connections?.[c.host] ?? []).length === 0) {
        find('orphan-host-connection', `${host} ${c.backendName}`, `connected to host ${c.host} with no attachment using it`, v ? { volumeId: v.id, host: c.host } : undefined);
      }
    }
  }


  return {
    liveAttachments,
    checked: {
      volumes: volumes.length,
      attachments: liveAttachments.size,
      backends: held.size,
      'backend volumes': [...held.values()].reduce((n, b) => n + b.volumes.size, 0),
      'host connections': [...held.values()].reduce((n, b) => n + b.connections.length, 0),
      'unmanaged backend volumes (ignored)': unmanaged,
      pools: pools.length,
      snapshots: snapshots.length,
      'replication operations': operations.size,
      'replication site volumes': siteVolumes,
    },
  };
}

function sortKeys(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
}

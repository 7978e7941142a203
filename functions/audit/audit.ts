/**
 * `ferry audit`: compares what DynamoDB says with what the drivers really hold, and lists every
 * orphan or mismatch. Upstream has nothing like it; operators ask for it (volumes stuck in
 * `reserved` or `attaching`, dangling attachments, exports nobody uses).
 *
 * It only reads. Each check names the invariant it verifies; a finding says which resource breaks
 * it and how, so an operator can act on it. Every integration scenario ends by asserting a clean
 * audit.
 */
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { attachmentFromItem, type Attachment } from '../attachments/model.js';
import { db } from '../core/db.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig, BackendConnection, BackendVolume } from '../drivers/volume/driver.js';
import { driverFor } from '../drivers/volume/registry.js';
import { backendOf, listBackends } from '../volumes/backends.js';
import type { Volume } from '../volumes/model.js';

export interface AuditFinding {
  kind: string;
  resource: string;
  detail: string;
}

export interface AuditReport {
  checked: Record<string, number>;
  findings: AuditFinding[];
}

export interface AuditOptions {
  /** A volume or attachment in a transitional status for longer than this is reported as stuck. Default 1 hour. */
  stuckAfterSeconds?: number;
  now?: Date;
}

/** Statuses an operation passes through; a volume should not stay in one for long. */
const TRANSITIONAL = new Set(['creating', 'deleting', 'managing', 'extending', 'reserved', 'attaching', 'detaching', 'retyping', 'downloading', 'uploading']);
/** Statuses in which the backend object must exist. */
const MUST_EXIST_ON_BACKEND = new Set(['available', 'in-use', 'reserved', 'attaching', 'detaching', 'extending', 'maintenance']);
/** Ferry's own backend object names; anything else on a backend is an operator's unmanaged volume. */
const FERRY_NAME = /^volume-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

async function scanAll(table: string): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let ExclusiveStartKey: Record<string, unknown> | undefined;
  do {
    const out = await db().send(new ScanCommand({ TableName: table, ExclusiveStartKey, ConsistentRead: true }));
    items.push(...((out.Items ?? []) as Record<string, unknown>[]));
    ExclusiveStartKey = out.LastEvaluatedKey;
  } while (ExclusiveStartKey);
  return items;
}

function stripKeys<T>(item: Record<string, unknown>): T {
  const { pk: _pk, sk: _sk, gsi1pk: _g1, gsi1sk: _g2, ...rest } = item;
  return rest as T;
}

export async function runAudit(options: AuditOptions = {}): Promise<AuditReport> {
  const now = (options.now ?? new Date()).getTime();
  const stuckMs = (options.stuckAfterSeconds ?? 3600) * 1000;
  const findings: AuditFinding[] = [];
  const find = (kind: string, resource: string, detail: string) => findings.push({ kind, resource, detail });

  const items = await scanAll(tableName('volume'));
  const volumes = items.filter((i) => i.sk === 'VOL').map((i) => stripKeys<Volume>(i));
  const attachmentItems = items.filter((i) => i.sk === 'ATT').map((i) => attachmentFromItem(i));
  const liveAttachments = new Map<string, Attachment>(attachmentItems.filter((a) => !a.deleted).map((a) => [a.id, a]));
  const volumesById = new Map(volumes.map((v) => [v.id, v]));
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

  // What each backend really holds.
  const backends = await listBackends();
  const held = new Map<string, { config: BackendConfig; volumes: Map<string, BackendVolume>; connections: BackendConnection[] }>();
  for (const config of backends) {
    const driver = driverFor(config);
    try {
      const [vols, conns] = await Promise.all([driver.listVolumes(), driver.listConnections()]);
      held.set(config.host, { config, volumes: new Map(vols.map((v) => [v.backendName, v])), connections: conns });
    } catch (e) {
      find('backend-unreadable', config.host, `the driver could not list the backend: ${(e as Error).message}`);
    }
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
        if (onBackend && !onBackend.connections.some((c) => c.backendName === v.backendName && c.host === host)) {
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
      if (backend?.connections.some((c) => c.backendName === v!.backendName && c.host === a.disconnect!.host)) {
        find('pending-disconnect', `attachment ${a.id}`, `deleted, but the connection on ${a.disconnect.host} it had to remove is still there`);
      }
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
      if (!v || (v.connections?.[c.host] ?? []).length === 0) {
        find('orphan-host-connection', `${host} ${c.backendName}`, `connected to host ${c.host} with no attachment using it`);
      }
    }
  }

  return {
    checked: {
      volumes: volumes.length,
      attachments: liveAttachments.size,
      backends: held.size,
      'backend volumes': [...held.values()].reduce((n, b) => n + b.volumes.size, 0),
      'host connections': [...held.values()].reduce((n, b) => n + b.connections.length, 0),
      'unmanaged backend volumes (ignored)': unmanaged,
      pools: pools.length,
    },
    findings,
  };
}

function sortKeys(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
}

export function formatAuditReport(report: AuditReport): string {
  const lines = Object.entries(report.checked).map(([k, n]) => `checked ${n} ${k}`);
  if (report.findings.length === 0) lines.push('audit clean');
  else lines.push(`${report.findings.length} finding(s):`);
  for (const f of report.findings) lines.push(`${f.kind}\t${f.resource}\t${f.detail}`);
  return lines.join('\n');
}

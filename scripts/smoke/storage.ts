/**
 * The smoke test's storage checks, each through the upstream CLIs: a volume's life with an
 * attachment (create, extend, attach, detach, delete), replication (a drill on the target, then
 * failover to it and back; the CLIs have no drill option, so the drill goes through the API as the
 * README shows it with curl), and a share migrated to another backend and back.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { cli, parseListTable, parsePropertyTable, waitFor, type Target } from './cli.js';

export interface Check {
  name: string;
  run(t: Target): Promise<string>;
}

/** Raised when the endpoint lacks what a check needs: the check is skipped with this reason. */
export class Skip extends Error {
  override name = 'Skip';
}

const volume = async (t: Target, id: string) => parsePropertyTable(await cli(t, `cinder show ${id}`));
const gone = async (t: Target, command: string) => {
  try {
    await cli(t, command);
    return false;
  } catch (e) {
    return /not be found|No .* with a name or ID|404/i.test((e as Error).message);
  }
};

async function newVolume(t: Target, name: string, extra = ''): Promise<string> {
  const id = parsePropertyTable(await cli(t, `cinder create --name ${name} ${extra} 1`)).id!;
  await waitFor(`volume ${name} available`, () => volume(t, id), (v) => v.status === 'available' || v.status === 'error');
  if ((await volume(t, id)).status !== 'available') throw new Error(`volume ${name} went to error`);
  return id;
}

async function deleteVolume(t: Target, id: string): Promise<void> {
  await cli(t, `cinder delete ${id}`);
  await waitFor(`volume ${id} deleted`, () => gone(t, `cinder show ${id}`), (g) => g);
}

export function volumeCheck(connectorHost: string | undefined): Check {
  return {
    name: 'volumes and attachments',
    async run(t) {
      const id = await newVolume(t, `smoke-${randomUUID().slice(0, 8)}`);
      await cli(t, `cinder extend ${id} 2`);
      await waitFor('extend to 2 GiB', () => volume(t, id), (v) => v.size === '2' && v.status === 'available');
      if (!connectorHost) {
        await deleteVolume(t, id);
        return 'create, extend, delete; attachments skipped: give --instance <EC2 instance id> for an EBS backend';
      }
      const att = parsePropertyTable(await cli(t, `cinder attachment-create ${id} ${randomUUID()}`)).id!;
      await cli(t, `cinder attachment-update --host ${connectorHost} --initiator iqn.2026-11.ferry:smoke --ip 127.0.0.1 ${att}`);
      await cli(t, `cinder attachment-complete ${att}`);
      const attached = await volume(t, id);
      if (attached.status !== 'in-use') throw new Error(`after attachment-complete the volume is ${attached.status}, not in-use`);
      await cli(t, `cinder attachment-delete ${att}`);
      await waitFor('detached', () => volume(t, id), (v) => v.status === 'available');
      await deleteVolume(t, id);
      return `create, extend, attach to ${connectorHost}, detach, delete`;
    },
  };
}

/** How long the replication check waits for the first replica, and an EFS migration for each phase (SMOKE_REPLICATION_WAIT_MINUTES, default 45: EBS passes and EFS polls run every 5 minutes). */
const replicationWaitMs = () => Number(process.env.SMOKE_REPLICATION_WAIT_MINUTES ?? 45) * 60_000;

interface TargetLag {
  volumes: number;
  replicated: number;
  max_lag_seconds: number | null;
  as_of: string;
}

/** The pool capability replication_lag of a backend's first pool for one target, as `cinder get-pools --detail` prints it (a Python literal). */
async function replicationLag(t: Target, backend: string, target: string): Promise<TargetLag | undefined> {
  const tables = (await cli(t, 'cinder get-pools --detail')).split(/\n(?=\+-+\+-+\+\n\| Property)/);
  const pool = tables.map(parsePropertyTable).find((p) => p.name?.startsWith(`${backend}#`));
  if (!pool?.replication_lag) return undefined;
  const json = pool.replication_lag.replace(/'/g, '"').replace(/\bNone\b/g, 'null').replace(/\bTrue\b/g, 'true').replace(/\bFalse\b/g, 'false');
  return (JSON.parse(json) as Record<string, TargetLag>)[target];
}

/** The os-services API (Ferry's drill extension; no CLI sends it). */
async function osServices(t: Target, method: 'GET' | 'PUT', path: string, body?: unknown): Promise<any> {
  const res = await fetch(new URL(`volume/v3/os-services${path}`, t.api), { method, headers: { 'X-Auth-Token': t.token, 'Content-Type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} os-services${path}: HTTP ${res.status}: ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** A drill on the target (replicas brought up there, the primary untouched), then its end: the backend enabled, no drill left. */
async function drill(t: Target, backend: string, target: string): Promise<void> {
  const state = async () => (await osServices(t, 'GET', `?host=${encodeURIComponent(backend)}&binary=cinder-volume`)).services[0] as { replication_status: string; drill?: { status: string } };
  await osServices(t, 'PUT', '/failover_host', { host: backend, backend_id: target, drill: true });
  const started = await waitFor(`a drill of ${backend} on ${target}`, state, (s) => s.drill?.status === 'active' || s.drill?.status === 'failed', replicationWaitMs());
  // Ended either way, so that a failed drill leaves nothing on the target.
  await osServices(t, 'PUT', '/failover_host', { host: backend, drill: 'end' });
  await waitFor(`the drill of ${backend} ended`, state, (s) => s.drill === undefined, replicationWaitMs());
  if (started.drill?.status !== 'active') throw new Error(`the drill of ${backend} on ${target} failed`);
  if (started.replication_status !== 'enabled') throw new Error(`a drill changed ${backend}'s replication status to ${started.replication_status}`);
}

export const replicationCheck: Check = {
  name: 'replication failover and failback',
  async run(t) {
    const services = parseListTable(await cli(t, 'cinder service-list --withreplication'));
    const backend = services.find((s) => s['Replication Status'] === 'enabled')?.Host;
    if (!backend) throw new Skip('no backend with replication enabled');
    const caps = parsePropertyTable(await cli(t, `cinder get-capabilities ${backend}`));
    const target = /'([^']+)'/.exec(caps.replication_targets ?? '')?.[1];
    const type = parseListTable(await cli(t, 'cinder extra-specs-list')).find((r) => /replication_enabled': '<is> True'/.test(r.extra_specs ?? ''))?.Name;
    if (!target || !type) throw new Skip(`${backend}: no replication target or no replicated volume type`);
    const createdAt = Date.now();
    const id = await newVolume(t, `smoke-r-${randomUUID().slice(0, 8)}`, `--volume-type ${type}`);
    // A failover now would put a volume with no replica on the target in error: wait until the
    // replication passes report a replica of every replicated volume there, the new one included
    // (on EBS a snapshot and its copy to the other region take minutes; locally a second).
    await waitFor(`a replica of every volume of ${backend} on ${target}`, () => replicationLag(t, backend, target), (lag) => lag !== undefined && lag.volumes > 0 && lag.replicated === lag.volumes && Date.parse(lag.as_of) > createdAt, replicationWaitMs());
    await drill(t, backend, target);
    const service = async () => parseListTable(await cli(t, 'cinder service-list --withreplication')).find((s) => s.Host === backend)!;
    await cli(t, `cinder failover-host ${backend} --backend_id ${target}`);
    await waitFor(`${backend} failed over to ${target}`, service, (s) => s['Active Backend ID'] === target && s['Replication Status'] === 'failed-over');
    await cli(t, `cinder failover-host ${backend} --backend_id default`);
    await waitFor(`${backend} failed back`, service, (s) => s['Replication Status'] === 'enabled');
    if ((await volume(t, id)).status !== 'available') throw new Error('the replicated volume is not available after failback');
    await deleteVolume(t, id);
    return `${backend}: a drill on ${target}, then failover to ${target} and back with a volume of type ${type}`;
  },
};

const share = async (t: Target, id: string) => parsePropertyTable(await cli(t, `manila show ${id}`));

export const shareMigrationCheck: Check = {
  name: 'share migration both ways',
  async run(t) {
    const pools = parseListTable(await cli(t, 'manila pool-list')).map((p) => p.Name!);
    if (pools.length < 2) throw new Skip(`${pools.length} share pool(s): migration needs two`);
    const [from, to] = pools as [string, string];
    const name = `smoke-${randomUUID().slice(0, 8)}`;
    const id = parsePropertyTable(await cli(t, `manila create NFS 1 --name ${name}`)).id!;
    await waitFor(`share ${name} available`, () => share(t, id), (s) => s.status === 'available');
    const exportPath = async () => parseListTable(await cli(t, `manila share-export-location-list ${id}`))[0]?.Path;
    // On the local stack the export is a directory here: a file written before must come back byte for byte.
    const before = await exportPath();
    const local = Boolean(before && existsSync(before));
    const content = randomUUID();
    if (local) await writeFile(join(before!, 'smoke.txt'), content);
    // An EFS share (its export a file system's DNS name) moves by EFS replication, driver-assisted,
    // with what EFS promises; the copy worker cannot mount a share's own file system. Any other
    // share is copied host-assisted, so the copy worker is exercised.
    const efs = /\.efs\.[a-z0-9-]+\.amazonaws\.com:\//.test(before ?? '');
    const flags = efs
      ? '--writable True --preserve-metadata True --preserve-snapshots False --nondisruptive False'
      : '--writable False --preserve-metadata False --preserve-snapshots False --nondisruptive False --force-host-assisted-migration True';
    for (const dest of [to, from]) {
      await cli(t, `manila migration-start ${id} ${dest} ${flags}`);
      // Phase 1 ends in data_copying_completed (host-assisted) or migration_driver_phase1_done (driver-assisted).
      const phase1Done = (s: Record<string, string>) => ['data_copying_completed', 'migration_driver_phase1_done', 'migration_error'].includes(s.task_state ?? '');
      // EFS replication polls every 5 minutes and its first sync takes minutes more.
      await waitFor(`${name} phase 1 to ${dest}`, () => share(t, id), phase1Done, efs ? replicationWaitMs() : undefined);
      if ((await share(t, id)).task_state === 'migration_error') throw new Error(`migration of ${name} to ${dest} failed in phase 1`);
      await cli(t, `manila migration-complete ${id}`);
      await waitFor(`${name} on ${dest}`, () => share(t, id), (s) => s.task_state === 'migration_success' || s.task_state === 'migration_error', efs ? replicationWaitMs() : undefined);
      const after = await share(t, id);
      if (after.task_state !== 'migration_success' || after.host !== dest) throw new Error(`after migration-complete ${name} is ${after.task_state} on ${after.host}`);
    }
    if (local && (await readFile(join((await exportPath())!, 'smoke.txt'), 'utf8')) !== content) throw new Error(`the file written into ${name} before the migrations did not come back unchanged`);
    await cli(t, `manila delete ${id}`);
    await waitFor(`share ${name} deleted`, () => gone(t, `manila show ${id}`), (g) => g);
    return `${from} -> ${to} -> ${from} (${efs ? 'driver-assisted, EFS replication' : 'host-assisted'})${local ? ', a file byte-identical' : '; data not checked (the export is not on this machine)'}`;
  },
};

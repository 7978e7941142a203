/**
 * The storage side of an inventory apply: volume and share backends and types, what is there now
 * (with why each is in use) and the writes that add, change and remove them.
 *
 * Removing a backend is one transaction: its record goes, and each of its pools is marked
 * `retired` on the condition that nothing is allocated there; the schedulers' reservations are
 * conditional on a pool not being retired, so no volume or share can land on a backend while it
 * is being removed. Objects whose capacity was released (an `error` volume still on the backend)
 * are found by their backend-object claims (volumes) or the share records (shares) before.
 */
import { PutCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { mkdir } from 'node:fs/promises';
import { db, isConditionFailure, queryAll } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { GSI1, tableName } from '../core/tables.js';
import type { ShareBackendConfig } from '../drivers/share/driver.js';
import type { BackendConfig } from '../drivers/volume/driver.js';
import { initialServiceState, listBackendRecords } from '../volumes/backends.js';
import { listClaims, poolKey } from '../volumes/repo.js';
import { allocatedOn } from '../volumes/scheduler.js';
import { createVolumeType, deleteExtraSpec, deleteVolumeType, listVolumeTypes, setExtraSpecs, updateVolumeType } from '../volumes/types.js';
import { shareBackendKey, sharePoolKey } from '../shares/model.js';
import { allocatedOnSharePool, listShareBackends, listShares } from '../shares/repo.js';
import { createShareType, deleteShareType, listShareTypes, setShareTypeFields } from '../shares/types.js';
import { canonical, hasShareRoot, shareBackendConfig, typeFields, volumeBackendConfig } from './records.js';
import type { LiveView } from './plan.js';
import type { ShareBackendEntry, TypeEntry, VolumeBackendEntry } from './schema.js';

const backendKey = (host: string) => ({ pk: `BACKEND#${host}`, sk: 'BACKEND' });

// ---- what is there ---------------------------------------------------------------------------

/**
 * `inUseOf`: the backends whose use is asked (an apply asks only of those it could remove, the
 * only ones plan.ts consults it for); default all (`ferry inventory show`).
 */
export async function liveVolumeBackends(inUseOf?: ReadonlySet<string>): Promise<LiveView> {
  // Every backend's reads side by side (an apply at every start waits for them).
  const backends = await Promise.all(
    (await listBackendRecords()).map(async ({ config }) => {
      if (inUseOf && !inUseOf.has(config.host)) return [config.host, { fields: canonical(config) }] as const;
      const [claims, pools] = await Promise.all([listClaims(config.host), Promise.all(config.pools.map((p) => allocatedOn(`${config.host}#${p.name}`)))]);
      const allocated = pools.reduce((a, b) => a + b, 0);
      const inUse = claims.size > 0 || allocated > 0 ? `holds ${claims.size} volume(s), ${allocated} GiB allocated` : undefined;
      return [config.host, { fields: canonical(config), inUse }] as const;
    }),
  );
  return new Map(backends);
}

/** Types with the count of volumes (or shares) of each, which the type's own delete is conditional on. */
async function liveTypes(table: 'volume' | 'share', gsi: string, counter: string, noun: string): Promise<LiveView> {
  const items = await queryAll({ TableName: tableName(table), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': gsi } });
  return new Map(
    items.map((i) => {
      const count = Number(i[counter] ?? 0);
      const fields = typeFields({ description: (i.description as string | null) ?? null, isPublic: i.isPublic !== false, extraSpecs: (i.extraSpecs as Record<string, string>) ?? {} });
      return [i.name as string, { fields: canonical(fields), inUse: count > 0 ? `${count} ${noun}(s) of this type` : undefined }];
    }),
  );
}

export const liveVolumeTypes = () => liveTypes('volume', 'VTYPES', 'volumeCount', 'volume');

/** `inUseOf` as for liveVolumeBackends: the shares are listed only when some backend's use is asked. */
export async function liveShareBackends(inUseOf?: ReadonlySet<string>): Promise<LiveView> {
  const configs = await listShareBackends();
  const asked = configs.filter((c) => !inUseOf || inUseOf.has(c.host));
  const shares = asked.length > 0 ? await listShares() : [];
  const backends = await Promise.all(
    configs.map(async (config) => {
      if (!asked.includes(config)) return [config.host, { fields: canonical(config) }] as const;
      const on = shares.filter((s) => s.host === config.host || s.host?.startsWith(`${config.host}#`)).length;
      const allocated = (await Promise.all(config.pools.map((p) => allocatedOnSharePool(`${config.host}#${p.name}`)))).reduce((a, b) => a + b, 0);
      return [config.host, { fields: canonical(config), inUse: on > 0 || allocated > 0 ? `holds ${on} share(s), ${allocated} GiB allocated` : undefined }] as const;
    }),
  );
  return new Map(backends);
}

export const liveShareTypes = () => liveTypes('share', 'STYPES', 'shareCount', 'share');

// ---- volume backends -------------------------------------------------------------------------

/** A new backend's record (with its service state) and its directories; its pools un-retired if it was removed before. */
export async function addVolumeBackend(entry: VolumeBackendEntry): Promise<void> {
  const config = volumeBackendConfig(entry);
  try {
    await db().send(
      new PutCommand({
        TableName: tableName('volume'),
        Item: { ...backendKey(config.host), gsi1pk: 'BACKENDS', gsi1sk: config.host, config, service: initialServiceState(config) },
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`volume backend ${config.host} was added by someone else meanwhile; run the apply again`);
    throw e;
  }
  await unretire('volume', config.pools.map((p) => poolKey(`${config.host}#${p.name}`)));
  await makeRoots(config);
}

/** The record's config replaced; its service state (failover, freeze) is the backend's own and stays. */
export async function updateVolumeBackend(entry: VolumeBackendEntry): Promise<void> {
  const config = volumeBackendConfig(entry);
  await db().send(
    new UpdateCommand({ TableName: tableName('volume'), Key: backendKey(config.host), UpdateExpression: 'SET config = :c', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':c': config } }),
  );
  await makeRoots(config);
}

export async function removeVolumeBackend(config: BackendConfig): Promise<void> {
  const claims = await listClaims(config.host);
  if (claims.size > 0) throw new Conflict(`volume backend ${config.host} holds ${claims.size} volume(s): delete or migrate them first`);
  await retireAndDelete('volume', backendKey(config.host), config.pools.map((p) => poolKey(`${config.host}#${p.name}`)), config.host);
}

async function makeRoots(config: BackendConfig): Promise<void> {
  if (config.driver !== 'local') return;
  for (const root of [config.root, ...(config.replicationDevices ?? []).map((d) => d.root)]) if (root) await mkdir(root, { recursive: true });
}

// ---- share backends --------------------------------------------------------------------------

export async function addShareBackend(entry: ShareBackendEntry): Promise<void> {
  const config = shareBackendConfig(entry);
  try {
    await db().send(
      new PutCommand({ TableName: tableName('share'), Item: { ...shareBackendKey(config.host), gsi1pk: 'SBACKENDS', gsi1sk: config.host, config }, ConditionExpression: 'attribute_not_exists(pk)' }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`share backend ${config.host} was added by someone else meanwhile; run the apply again`);
    throw e;
  }
  await unretire('share', config.pools.map((p) => sharePoolKey(`${config.host}#${p.name}`)));
  await makeShareRoot(entry);
}

export async function updateShareBackend(entry: ShareBackendEntry): Promise<void> {
  const config = shareBackendConfig(entry);
  await db().send(
    new UpdateCommand({ TableName: tableName('share'), Key: shareBackendKey(config.host), UpdateExpression: 'SET config = :c', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':c': config } }),
  );
  await makeShareRoot(entry);
}

/** A local kind's directory (an aws-efs backend has none: its file systems are made per share). */
async function makeShareRoot(entry: ShareBackendEntry): Promise<void> {
  if (hasShareRoot(entry)) await mkdir(entry.root, { recursive: true });
}

export async function removeShareBackend(config: ShareBackendConfig): Promise<void> {
  const on = (await listShares()).filter((s) => s.host === config.host || s.host?.startsWith(`${config.host}#`)).length;
  if (on > 0) throw new Conflict(`share backend ${config.host} holds ${on} share(s): delete or migrate them first`);
  await retireAndDelete('share', shareBackendKey(config.host), config.pools.map((p) => sharePoolKey(`${config.host}#${p.name}`)), config.host);
}

// ---- shared by both kinds --------------------------------------------------------------------

type Key = { pk: string; sk: string };

/** One transaction: every pool retired while nothing is allocated on it, and the backend record deleted. */
async function retireAndDelete(table: 'volume' | 'share', backend: Key, pools: Key[], host: string): Promise<void> {
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Delete: { TableName: tableName(table), Key: backend, ConditionExpression: 'attribute_exists(pk)' } },
          ...pools.map((Key) => ({
            Update: {
              TableName: tableName(table),
              Key,
              UpdateExpression: 'SET retired = :t',
              ConditionExpression: 'attribute_not_exists(allocatedGb) OR allocatedGb <= :zero',
              ExpressionAttributeValues: { ':t': true, ':zero': 0 },
            },
          })),
        ],
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`${table} backend ${host} is in use (capacity allocated on one of its pools) or already gone: nothing removed`);
    throw e;
  }
}

async function unretire(table: 'volume' | 'share', pools: Key[]): Promise<void> {
  for (const Key of pools) {
    await db().send(new UpdateCommand({ TableName: tableName(table), Key, UpdateExpression: 'REMOVE retired', ConditionExpression: 'attribute_exists(pk)' })).catch((e) => {
      if (!isConditionFailure(e)) throw e;
    });
  }
}

// ---- types -----------------------------------------------------------------------------------

export async function addVolumeType(t: TypeEntry): Promise<void> {
  await createVolumeType({ name: t.name, ...typeFields(t) });
}

export async function updateVolumeTypeFields(t: TypeEntry): Promise<void> {
  const current = (await listVolumeTypes()).find((x) => x.name === t.name);
  if (!current) throw new Conflict(`volume type ${t.name} vanished meanwhile; run the apply again`);
  const want = typeFields(t);
  await updateVolumeType(current.id, { description: want.description, isPublic: want.isPublic });
  if (Object.keys(want.extraSpecs).length) await setExtraSpecs(current.id, want.extraSpecs);
  for (const key of Object.keys(current.extraSpecs)) if (!(key in want.extraSpecs)) await deleteExtraSpec(current.id, key);
}

export async function removeVolumeType(name: string): Promise<void> {
  const current = (await listVolumeTypes()).find((x) => x.name === name);
  if (current) await deleteVolumeType(current.id);
}

export async function addShareType(t: TypeEntry): Promise<void> {
  await createShareType({ name: t.name, ...typeFields(t) });
}

export async function updateShareTypeFields(t: TypeEntry): Promise<void> {
  const current = (await listShareTypes()).find((x) => x.name === t.name);
  if (!current) throw new Conflict(`share type ${t.name} vanished meanwhile; run the apply again`);
  await setShareTypeFields(current.id, typeFields(t));
}

export async function removeShareType(name: string): Promise<void> {
  const current = (await listShareTypes()).find((x) => x.name === name);
  if (current) await deleteShareType(current.id);
}


/**
 * Volume backends (Cinder's volume services) as records in the volume table, so every function
 * finds the same configuration: `pk = BACKEND#<host@backend>`, `sk = BACKEND`.
 * The local stack seeds them; an operator adds one with a put of the same shape.
 *
 * Also the way from a volume's host to its driver: the record is read here and handed to the driver
 * registry, which takes configuration only and reads no table.
 */
import { GetCommand, PutCommand, QueryCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { NotFound } from '../core/errors.js';
import { GSI1, tableName } from '../core/tables.js';
import type { BackendConfig, BackendServiceState, VolumeDriver } from '../drivers/volume/driver.js';
import { driverFor } from '../drivers/volume/registry.js';
import type { BackendLag } from '../drivers/volume/replication-lag.js';

const backendKey = (host: string) => ({ pk: `BACKEND#${host}`, sk: 'BACKEND' });

/** `ferry@lvm-a#pool0` -> `ferry@lvm-a` */
export function backendOf(host: string): string {
  const i = host.indexOf('#');
  return i < 0 ? host : host.slice(0, i);
}

/** `ferry@lvm-a#pool0` -> `pool0` (Cinder's volume_utils.extract_host level 'pool'). */
export function poolOf(host: string): string | undefined {
  const i = host.indexOf('#');
  return i < 0 ? undefined : host.slice(i + 1);
}

export async function putBackend(config: BackendConfig): Promise<void> {
  await db().send(new PutCommand({ TableName: tableName('volume'), Item: { ...backendKey(config.host), gsi1pk: 'BACKENDS', gsi1sk: config.host, config } }));
}

export async function getBackend(host: string): Promise<BackendConfig> {
  return (await getBackendRecord(host)).config;
}

/** The service state of a backend never failed over or frozen. */
export function initialServiceState(config: BackendConfig): BackendServiceState {
  return {
    replicationStatus: config.replicationDevices?.length ? 'enabled' : 'disabled',
    activeBackendId: '',
    frozen: false,
    disabled: false,
    disabledReason: '',
  };
}

/** A backend's config and its service state (replication status, active backend, frozen). */
export async function getBackendRecord(host: string): Promise<{ config: BackendConfig; service: BackendServiceState }> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: backendKey(backendOf(host)) }));
  if (!out.Item) throw new NotFound(`Service ${backendOf(host)} could not be found.`);
  const config = out.Item.config as BackendConfig;
  return { config, service: (out.Item.service as BackendServiceState | undefined) ?? initialServiceState(config) };
}

/** Every backend with its service state (the scheduler skips frozen and disabled ones; os-services lists them) and its last measured replication lag. */
export async function listBackendRecords(): Promise<{ config: BackendConfig; service: BackendServiceState; replicationLag?: BackendLag }[]> {
  const out = await db().send(
    new QueryCommand({ TableName: tableName('volume'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'BACKENDS' } }),
  );
  return (out.Items ?? []).map((i) => {
    const config = i.config as BackendConfig;
    const replicationLag = i.replicationLag as BackendLag | undefined;
    return { config, service: (i.service as BackendServiceState | undefined) ?? initialServiceState(config), ...(replicationLag ? { replicationLag } : {}) };
  });
}

/**
 * Records what a replication pass measured (replication-lag.ts) on the backend's item. The
 * condition keeps the newest: a slower pass finishing after a newer one does not overwrite it, and
 * a backend removed meanwhile is not brought back. Returns whether it was recorded.
 */
export async function recordReplicationLag(host: string, lag: BackendLag): Promise<boolean> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(backendOf(host)),
        UpdateExpression: 'SET replicationLag = :lag',
        ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(replicationLag) OR replicationLag.#at < :at)',
        ExpressionAttributeNames: { '#at': 'at' },
        ExpressionAttributeValues: { ':lag': lag, ':at': lag.at },
      }),
    );
    return true;
  } catch (e) {
    if (isConditionFailure(e)) return false;
    throw e;
  }
}

export async function listBackends(): Promise<BackendConfig[]> {
  const out = await db().send(
    new QueryCommand({ TableName: tableName('volume'), IndexName: GSI1, KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': 'BACKENDS' } }),
  );
  return (out.Items ?? []).map((i) => i.config as BackendConfig);
}

/** Driver for a volume's `host` (`host@backend#pool`) or a backend `host@backend`, at the site its service is active on. */
export async function driverForHost(host: string): Promise<VolumeDriver> {
  const record = await getBackendRecord(host);
  return driverFor(record.config, record.service.activeBackendId);
}

/**
 * The `driver_volume_type` the connection_info of a volume on this host will carry, as its backend's
 * driver declares it ('local', 'aws_ebs'): Nova checks it against what the compute driver can
 * connect before an attach starts. NotFound when the backend does not exist.
 */
export async function driverVolumeTypeOfHost(host: string): Promise<string> {
  return (await driverForHost(host)).driverVolumeType;
}

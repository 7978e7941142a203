/**
 * Persistence of a backend's replication service state (reference §2.3) on its backend item
 * (volumes/backends.ts): the `service` map; `failoverOperationId` (the operation that set
 * `failing-over`); `drill` ({operationId, target, status}) while a drill exists.
 *
 * Every change of `service` is a conditional write whose condition is the transition's guard
 * (frozen = false for freeze, replication_status in [...] for failover, ...), so two requests
 * racing for one backend cannot both pass; no read-then-write.
 */
import { GetCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, withRetries } from '../core/db.js';
import { BadRequest, FerryError, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import type { BackendConfig, BackendServiceState } from '../drivers/volume/driver.js';
import { backendOf, initialServiceState } from '../volumes/backends.js';
import { cancellationCodes } from '../volumes/repo.js';
import { FAILOVER_FROM, serviceTransition, type ServiceEvent } from './service-state.js';
import { REPLICATION } from '../volumes/model.js';

import { operationKey, type ReplicationOperation } from './repo.js';

const backendKey = (host: string) => ({ pk: `BACKEND#${backendOf(host)}`, sk: 'BACKEND' });

export interface DrillState {
  operationId: string;
  target: string;
  /** starting -> active (copies up) | failed (some copies may exist) -> ending -> removed */
  status: 'starting' | 'active' | 'failed' | 'ending';
  /** The operation that is removing the copies, while ending. */
  endOperationId?: string;
}

export interface BackendItem {
  config: BackendConfig;
  service: BackendServiceState;
  /** False when the item predates service state (a backend put without it). */
  hasService: boolean;
  failoverOperationId?: string;
  drill?: DrillState;
}

export async function getBackendItem(host: string): Promise<BackendItem> {
  const out = await db().send(new GetCommand({ TableName: tableName('volume'), Key: backendKey(host), ConsistentRead: true }));
  if (!out.Item) throw new NotFound(`Service ${backendOf(host)} could not be found.`);
  const config = out.Item.config as BackendConfig;
  const service = out.Item.service as BackendServiceState | undefined;
  return {
    config,
    service: service ?? initialServiceState(config),
    hasService: service !== undefined,
    failoverOperationId: out.Item.failoverOperationId as string | undefined,
    drill: out.Item.drill as DrillState | undefined,
  };
}

/**
 * Gives a backend item its `service` map if it has none (a backend put before service state
 * existed), so the conditions below can name `service.<field>`. Never replaces an existing one.
 */
export async function ensureServiceState(item: BackendItem): Promise<void> {
  if (item.hasService) return;
  await db().send(
    new UpdateCommand({
      TableName: tableName('volume'),
      Key: backendKey(item.config.host),
      UpdateExpression: 'SET #service = if_not_exists(#service, :initial)',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeNames: { '#service': 'service' },
      ExpressionAttributeValues: { ':initial': initialServiceState(item.config) },
    }),
  );
}

/** What a request changes on the backend item, and the condition under which the backend accepts it. */
interface BackendUpdate {
  UpdateExpression: string;
  ConditionExpression: string;
  ExpressionAttributeNames?: Record<string, string>;
  ExpressionAttributeValues: Record<string, unknown>;
}

/**
 * The backend item's update and the new operation's record in one transaction, so an operation
 * exists exactly when its backend accepted it. When the backend's condition refuses, `refused`
 * throws the reason (it gets the transaction's error to rethrow when it has none better).
 */
async function updateWithOperation(host: string, update: BackendUpdate, operation: Record<string, unknown> & { id: string }, refused: (e: unknown) => Promise<never>): Promise<void> {
  try {
    await db().send(
      new TransactWriteCommand({
        TransactItems: [
          { Update: { TableName: tableName('volume'), Key: backendKey(host), ...update } },
          { Put: { TableName: tableName('volume'), Item: { ...operationKey(operation.id), ...operation }, ConditionExpression: 'attribute_not_exists(pk)' } },
        ],
      }),
    );
  } catch (e) {
    if (cancellationCodes(e)[0] === 'ConditionalCheckFailed') await refused(e);
    throw e;
  }
}

/**
 * API failover accepted: `failing-over`, conditional on replication_status being enabled or
 * failed-over (upstream's `_replication_db_change`), written with the operation record in one
 * transaction. Refused -> the transition's own 400 (upstream's message).
 */
export async function beginFailover(item: BackendItem, op: ReplicationOperation): Promise<void> {
  const host = item.config.host;
  await updateWithOperation(
    host,
    {
      UpdateExpression: 'SET #service.#rs = :failingOver, failoverOperationId = :op',
      ConditionExpression: '#service.#rs IN (:from0, :from1)',
      ExpressionAttributeNames: { '#service': 'service', '#rs': 'replicationStatus' },
      ExpressionAttributeValues: { ':failingOver': REPLICATION.failingOver, ':op': op.id, ':from0': FAILOVER_FROM[0], ':from1': FAILOVER_FROM[1] },
    },
    { ...op },
    async (e) => {
      const refusal = serviceTransition(host, { ...item.service, replicationStatus: REPLICATION.failingOver }, { type: 'failover-requested' });
      throw refusal instanceof FerryError ? refusal : e;
    },
  );
}

/** Starts a drill: only from the primary (`enabled`) and only one drill per backend at a time. */
export async function beginDrill(item: BackendItem, op: ReplicationOperation, target: string): Promise<void> {
  const host = item.config.host;
  const drill: DrillState = { operationId: op.id, target, status: 'starting' };
  await updateWithOperation(
    host,
    {
      UpdateExpression: 'SET drill = :drill',
      ConditionExpression: '#service.#rs = :enabled AND attribute_not_exists(drill)',
      ExpressionAttributeNames: { '#service': 'service', '#rs': 'replicationStatus' },
      ExpressionAttributeValues: { ':drill': drill, ':enabled': REPLICATION.enabled },
    },
    { ...op, target },
    async () => {
      const now = await getBackendItem(host);
      if (now.drill) throw new BadRequest(`Invalid input received: Backend ${host} already has a drill (${now.drill.status}, operation ${now.drill.operationId}); end it first with {"drill": "end"}.`);
      throw new BadRequest(`Invalid input received: A drill needs backend ${host} running on its primary with replication_status enabled; it is ${now.service.replicationStatus}.`);
    },
  );
}

/** Starts removing a drill's copies: the drill must be active or failed (a failed one may have made some). */
export async function beginDrillEnd(item: BackendItem, op: ReplicationOperation): Promise<void> {
  const host = item.config.host;
  await updateWithOperation(
    host,
    {
      UpdateExpression: 'SET drill.#status = :ending, drill.endOperationId = :op',
      ConditionExpression: 'drill.#status IN (:active, :failed)',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':ending': 'ending', ':op': op.id, ':active': 'active', ':failed': 'failed' },
    },
    { ...op },
    async () => {
      const now = await getBackendItem(host);
      throw new BadRequest(
        now.drill
          ? `Invalid input received: The drill on backend ${host} is ${now.drill.status}; it can be ended once it is active or failed.`
          : `Invalid input received: Backend ${host} has no drill to end.`,
      );
    },
  );
}

/** The drill's next status, conditional on the operation still owning it. `undefined` removes the drill. */
export async function setDrillStatus(host: string, operationId: string, status: DrillState['status'] | undefined): Promise<void> {
  const removing = status === undefined;
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: removing ? 'REMOVE drill' : 'SET drill.#status = :status',
        ConditionExpression: 'drill.operationId = :op OR drill.endOperationId = :op',
        ExpressionAttributeNames: removing ? undefined : { '#status': 'status' },
        ExpressionAttributeValues: { ':op': operationId, ...(removing ? {} : { ':status': status }) },
      }),
    );
  } catch (e) {
    // Another operation owns the drill now (or it is gone): nothing of ours to change.
    if (!isConditionFailure(e)) throw e;
  }
}

/** freeze: frozen false -> true, disabled with reason `frozen`, in one conditional write. */
export async function freezeService(item: BackendItem): Promise<void> {
  const host = item.config.host;
  const after = serviceTransition(host, { ...item.service, frozen: false }, { type: 'freeze' }) as BackendServiceState;
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: 'SET #service.frozen = :true, #service.disabled = :true, #service.disabledReason = :reason',
        ConditionExpression: '#service.frozen = :false',
        ExpressionAttributeNames: { '#service': 'service' },
        ExpressionAttributeValues: { ':true': true, ':false': false, ':reason': after.disabledReason },
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw serviceTransition(host, { ...item.service, frozen: true }, { type: 'freeze' }) as FerryError;
    throw e;
  }
}

/** thaw, the DB half: frozen true -> false (the service stays disabled until the driver agrees). */
export async function thawService(item: BackendItem): Promise<void> {
  const host = item.config.host;
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: 'SET #service.frozen = :false',
        ConditionExpression: '#service.frozen = :true',
        ExpressionAttributeNames: { '#service': 'service' },
        ExpressionAttributeValues: { ':true': true, ':false': false },
      }),
    );
  } catch (e) {
    if (isConditionFailure(e)) throw serviceTransition(host, { ...item.service, frozen: false }, { type: 'thaw' }) as FerryError;
    throw e;
  }
}

/** thaw, after the driver thawed: enabled again, unless a freeze came in between. */
export async function enableAfterThaw(host: string): Promise<void> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: backendKey(host),
        UpdateExpression: 'SET #service.disabled = :false, #service.disabledReason = :empty',
        ConditionExpression: '#service.frozen = :false',
        ExpressionAttributeNames: { '#service': 'service' },
        ExpressionAttributeValues: { ':false': false, ':empty': '' },
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
  }
}

/**
 * Applies a failover-ending event (succeeded / invalid target / failed) for `operationId`: read,
 * pure transition, then one write conditioned on the fields the transition read (status
 * failing-over for this operation, and `frozen`, which failback copies into `disabled`). A race
 * re-reads and re-applies. Returns false when the service no longer belongs to this operation
 * (an earlier run of the step already finished it) — idempotent.
 */
export async function finishServiceFailover(host: string, operationId: string, event: ServiceEvent): Promise<boolean> {
  return withRetries(
    async () => {
      const item = await getBackendItem(host);
      if (item.failoverOperationId !== operationId || item.service.replicationStatus !== REPLICATION.failingOver) return false;
      const after = serviceTransition(host, item.service, event);
      if (after instanceof FerryError) throw after;
      // A failback's end drops the lag measured before the failover (the pools showed those copies'
      // age): absent until the next pass measures the copies from the failback's own point on.
      const failedBack = event.type === 'failover-succeeded' && event.failback;
      await db().send(
        new UpdateCommand({
          TableName: tableName('volume'),
          Key: backendKey(host),
          UpdateExpression: `SET #service = :after${failedBack ? ' REMOVE replicationLag' : ''}`,
          ConditionExpression: 'failoverOperationId = :op AND #service.#rs = :failingOver AND #service.frozen = :frozen',
          ExpressionAttributeNames: { '#service': 'service', '#rs': 'replicationStatus' },
          ExpressionAttributeValues: { ':after': after, ':op': operationId, ':failingOver': REPLICATION.failingOver, ':frozen': item.service.frozen },
        }),
      );
      return true;
    },
    { retryable: isConditionFailure, attempts: 20 },
  );
}

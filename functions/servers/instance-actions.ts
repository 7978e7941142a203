/**
 * Persistence of instance actions and their events (Nova's os-instance-actions records), in the
 * instance's partition of its cell's table, so an action is put in the same transaction as the
 * instance change that starts it. An event change is a write conditional on the action's
 * `updatedAt` as read (or as this process last wrote it: last-written.ts); a lost race re-reads
 * and re-applies.
 */
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { CellMapping } from '../compute/model.js';
import { cellTable, fromItem, type TransactItem } from '../compute/repo.js';
import { db, isConditionFailure, withRetries } from '../core/db.js';
import { LastWritten, stampAfter } from './last-written.js';
import { actionKey, SERVER_GSI, type Instance, type InstanceAction, type InstanceActionEvent } from './model.js';

const now = () => new Date().toISOString();

/**
 * The item; on GSI1 under `ACTIONS` by start time, so the cell's recent actions (what `ferry ops`
 * lists as server operations) are one Query, not a scan of the cell.
 */
function actionItem(a: InstanceAction): Record<string, unknown> {
  return { ...actionKey(a.instanceUuid, a.requestId), gsi1pk: SERVER_GSI.actions, gsi1sk: `${a.startTime}#${a.instanceUuid}#${a.requestId}`, ...a };
}

export function newAction(instance: Pick<Instance, 'uuid' | 'projectId' | 'userId'>, action: string, requestId: string, at = now()): InstanceAction {
  return { action, instanceUuid: instance.uuid, requestId, userId: instance.userId, projectId: instance.projectId, startTime: at, finishTime: null, message: null, updatedAt: at, events: [] };
}

export function actionPutItem(cell: CellMapping, a: InstanceAction): TransactItem {
  return { Put: { TableName: cellTable(cell), Item: actionItem(a), ConditionExpression: 'attribute_not_exists(pk)' } };
}

/** The action as this process last read or wrote it, the base of its next event write (last-written.ts). */
const lastActions = new LastWritten<InstanceAction>();

/** An action just written whole (with the instance change that starts it): the base of its first event. */
export function rememberAction(cell: CellMapping, a: InstanceAction): void {
  lastActions.set(`${cellTable(cell)}|${a.instanceUuid}|${a.requestId}`, a);
}

async function updateAction(cell: CellMapping, instanceUuid: string, requestId: string, change: (a: InstanceAction) => InstanceAction): Promise<void> {
  const table = cellTable(cell);
  const memoKey = `${table}|${instanceUuid}|${requestId}`;
  await withRetries(
    async (attempt) => {
      let before = attempt === 0 ? lastActions.get(memoKey) : undefined;
      if (!before) {
        const out = await db().send(new GetCommand({ TableName: table, Key: actionKey(instanceUuid, requestId), ConsistentRead: true }));
        if (!out.Item) return; // the instance was hard-deleted (or the action never recorded): nothing to note
        before = fromItem<InstanceAction>(out.Item);
      }
      const after = { ...change(before), updatedAt: stampAfter(before.updatedAt) };
      // Another writer came between (or the item is gone): refused, and the next attempt reads it afresh.
      await lastActions.putIfStamp(memoKey, table, actionItem(after), before.updatedAt, after);
    },
    { retryable: (e) => isConditionFailure(e) },
  );
}

/** Starts an event of an action (`wrap_instance_event`); starting one already started is a no-op (retried steps). */
export async function startEvent(cell: CellMapping, instanceUuid: string, requestId: string, event: string, host: string | null): Promise<void> {
  await updateAction(cell, instanceUuid, requestId, (a) =>
    a.events.some((e) => e.event === event)
      ? a
      : { ...a, events: [...a.events, { event, startTime: now(), finishTime: null, result: null, traceback: null, host, details: null }] },
  );
}

/** Finishes an event: 'Success', or 'Error' with the traceback, which also sets the action's message. */
export async function finishEvent(cell: CellMapping, instanceUuid: string, requestId: string, event: string, error?: { message: string; traceback?: string }): Promise<void> {
  await updateAction(cell, instanceUuid, requestId, (a) => {
    const at = now();
    const found = a.events.find((e) => e.event === event);
    const base: InstanceActionEvent = found ?? { event, startTime: at, finishTime: null, result: null, traceback: null, host: null, details: null };
    const finished: InstanceActionEvent = {
      ...base,
      finishTime: at,
      result: error ? 'Error' : 'Success',
      traceback: error ? (error.traceback ?? error.message) : null,
      details: error ? error.message : null,
    };
    return {
      ...a,
      finishTime: at,
      message: error ? 'Error' : a.message,
      events: found ? a.events.map((e) => (e.event === event ? finished : e)) : [...a.events, finished],
    };
  });
}

/**
 * Nova's answer to Cinder's "does a server still use this attachment?" (attachments/ports.ts),
 * given as conditions of Cinder's own delete transaction (a read of the same items, with the volume,
 * tells a delete by id before it cuts the connection; the conditions still decide).
 *
 * The record that says so is the instance item: every write of an instance's BDMs rewrites it
 * (repo.ts updateServer, createServerRecords) with `attachmentsInUse` (attachment -> volume), so
 * a BDM that starts using the attachment moves the very item the delete's ConditionCheck reads.
 * One check per cell table, with no read of the cell mappings: the tables a copy of an instance
 * can live in are the deployment's (CELL_TABLES), and during a cross-cell move the hidden copy's
 * BDMs count too, as Cinder's check through Nova's API counted them. An instance item exists only
 * while its mapping does (the mapping is created with it and hard-deleted last), so the mapping
 * needs no check of its own.
 */
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { AttachmentUsers, TransactCondition } from '../attachments/ports.js';
import { CELL_TABLES } from '../compute/model.js';
import { fromItem } from '../compute/repo.js';
import { db, isConditionFailure, queryAll } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { attachmentsInUseOf, instanceKey, type BlockDeviceMapping, type Instance } from './model.js';

/** Holds while the instance item is absent or records that none of its BDMs uses the attachment (of that volume). */
const NOT_IN_USE = 'attribute_not_exists(pk) OR (attribute_type(#inUse, :map) AND (attribute_not_exists(#inUse.#att) OR #inUse.#att <> :volume))';

function notInUseConditions(instanceUuid: string, volumeId: string, attachmentId: string): TransactCondition[] {
  return CELL_TABLES.map((table) => ({
    ConditionCheck: {
      TableName: tableName(table),
      Key: instanceKey(instanceUuid),
      ConditionExpression: NOT_IN_USE,
      ExpressionAttributeNames: { '#inUse': 'attachmentsInUse', '#att': attachmentId },
      ExpressionAttributeValues: { ':map': 'M', ':volume': volumeId },
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    },
  }));
}

function notInUseReads(instanceUuid: string): { TableName: string; Key: Record<string, unknown> }[] {
  return CELL_TABLES.map((table) => ({ TableName: tableName(table), Key: instanceKey(instanceUuid) }));
}

/** NOT_IN_USE on an item as read. */
function holdsNotInUse(item: Record<string, unknown> | undefined, volumeId: string, attachmentId: string): boolean {
  if (!item) return true;
  const inUse = item.attachmentsInUse;
  return typeof inUse === 'object' && inUse !== null && !Array.isArray(inUse) && (inUse as Record<string, unknown>)[attachmentId] !== volumeId;
}

async function whyRefused(instanceUuid: string, volumeId: string, attachmentId: string, index: number, old: Record<string, unknown> | undefined): Promise<'in-use' | 'retry'> {
  const recorded = old?.attachmentsInUse as Record<string, string> | undefined;
  if (recorded && typeof recorded === 'object') return recorded[attachmentId] === volumeId ? 'in-use' : 'retry';
  const table = CELL_TABLES[index];
  if (table) await recordAttachmentsInUse(tableName(table), instanceUuid);
  return 'retry';
}

/**
 * Writes `attachmentsInUse` onto an instance item written before it, from its BDMs. The instance
 * is read first and the write is conditional on its version: every BDM change bumps that version
 * in the same transaction, so BDMs read after it and a write that still finds it are the BDMs the
 * record names (a Query alone could see a concurrent transaction's BDMs and instance apart). It
 * leaves the version alone: the field says nothing the version does not already name.
 */
async function recordAttachmentsInUse(table: string, instanceUuid: string): Promise<void> {
  const out = await db().send(new GetCommand({ TableName: table, Key: instanceKey(instanceUuid), ConsistentRead: true }));
  if (!out.Item || out.Item.attachmentsInUse !== undefined) return;
  const instance = fromItem<Instance>(out.Item);
  const bdms = (
    await queryAll({
      TableName: table,
      KeyConditionExpression: 'pk = :p AND begins_with(sk, :bdm)',
      ExpressionAttributeValues: { ':p': instanceKey(instanceUuid).pk, ':bdm': 'BDM#' },
      ConsistentRead: true,
    })
  ).map((i) => fromItem<BlockDeviceMapping>(i));
  try {
    await db().send(
      new UpdateCommand({
        TableName: table,
        Key: instanceKey(instanceUuid),
        UpdateExpression: 'SET attachmentsInUse = :inUse',
        ConditionExpression: 'version = :version AND attribute_not_exists(attachmentsInUse)',
        ExpressionAttributeValues: { ':inUse': attachmentsInUseOf(bdms), ':version': instance.version },
      }),
    );
  } catch (e) {
    // The instance moved on (its own write records what its BDMs say) or another delete recorded it.
    if (!isConditionFailure(e)) throw e;
  }
}

/** What every entry point that deletes attachments registers (attachments/ports.ts registerAttachmentUsers). */
export const SERVER_ATTACHMENT_USERS: AttachmentUsers = { notInUseConditions, notInUseReads, holdsNotInUse, whyRefused };

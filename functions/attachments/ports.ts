/**
 * Ports of the attachments capability: questions Cinder asks a layer above it (Nova), answered by
 * whatever the entry point registers. The attachments code never imports the servers code; the
 * Cinder API handler (api/volume.ts) and the Nova entry points (api/compute.ts, servers/steps.ts)
 * register the implementation when they load.
 */
import type { TransactWriteCommandInput } from '@aws-sdk/lib-dynamodb';
import { ConfigurationError } from '../core/errors.js';

/** One item of a TransactWriteItems request. */
export type TransactCondition = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

/**
 * Whether a server still uses an attachment (Cinder's `attachment_deletion_allowed` check), asked
 * inside the delete's own transaction: a server that attaches between the delete's reads and its
 * write makes the transaction fail, never a delete of an attachment in use. A delete by id, whose
 * terminate comes before its transaction, also reads the same records with the volume (one
 * request), so that an attachment in use is refused before its connection is cut.
 */
export interface AttachmentUsers {
  /**
   * ConditionChecks for the delete's TransactWriteItems, one per record that can show server
   * `instanceUuid` using `attachmentId` of `volumeId`: each holds only while that record does not.
   * Each returns the item it checked when it fails (ReturnValuesOnConditionCheckFailure ALL_OLD).
   */
  notInUseConditions(instanceUuid: string, volumeId: string, attachmentId: string): TransactCondition[];
  /**
   * The records notInUseConditions checks, in its order, to read before an effect a delete makes
   * ahead of its transaction (the terminate of the host's connection: service.ts deleteById), so a
   * server that uses the attachment is answered before its connection is cut.
   */
  notInUseReads(instanceUuid: string): { TableName: string; Key: Record<string, unknown> }[];
  /** Whether a record as read (undefined: absent) holds notInUseConditions' condition; one that does not is asked whyRefused. */
  holdsNotInUse(item: Record<string, unknown> | undefined, volumeId: string, attachmentId: string): boolean;
  /**
   * Why condition `index` of notInUseConditions failed, given the item it returned (unmarshalled):
   * 'in-use' when the record shows the server using the attachment; 'retry' when it does not say
   * (a record written before servers recorded their attachments in use: what its BDMs say is
   * written onto it first, so the next attempt's condition answers) or has changed since.
   */
  whyRefused(instanceUuid: string, volumeId: string, attachmentId: string, index: number, old: Record<string, unknown> | undefined): Promise<'in-use' | 'retry'>;
}

let registered: AttachmentUsers | undefined;

/** Called by an entry point when it loads; a later registration replaces an earlier one (all register the same one). */
export function registerAttachmentUsers(impl: AttachmentUsers): void {
  registered = impl;
}

/** The registered AttachmentUsers; a ConfigurationError when no entry point registered one. */
export function getAttachmentUsers(): AttachmentUsers {
  if (!registered) {
    throw new ConfigurationError('No AttachmentUsers port is registered: the entry point must call registerAttachmentUsers (functions/attachments/ports.ts) before deleting attachments.');
  }
  return registered;
}

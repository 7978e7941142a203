/**
 * "Frozen" (reference §2.5): while a backend is frozen, volume delete and snapshot create/delete
 * are refused with upstream's 400. The check is a read for the message (upstream's
 * `assert_not_frozen`) AND a ConditionCheck on the backend item inside the very transaction that
 * makes the change, so a freeze that lands between the two still stops it.
 */
import { BadRequest } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { backendOf, getBackendRecord } from './backends.js';
import type { TransactItem } from './repo.js';

export const FROZEN_MESSAGE = 'Invalid input received: Modification operations are not allowed on frozen storage backends.';

export class BackendFrozen extends BadRequest {
  constructor(host: string) {
    super(FROZEN_MESSAGE, { context: { host } });
  }
}

/** Throws BackendFrozen when the backend of `host` (`host@backend[#pool]`) is frozen. */
export async function assertNotFrozen(host: string): Promise<void> {
  const { service } = await getBackendRecord(host);
  if (service.frozen) throw new BackendFrozen(backendOf(host));
}

/** The transaction item that holds only while the backend is not frozen (a backend without service state never was). */
export function notFrozenCheck(host: string): TransactItem {
  return {
    ConditionCheck: {
      TableName: tableName('volume'),
      Key: { pk: `BACKEND#${backendOf(host)}`, sk: 'BACKEND' },
      ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(#service.frozen) OR #service.frozen = :false)',
      ExpressionAttributeNames: { '#service': 'service' },
      ExpressionAttributeValues: { ':false': false },
    },
  };
}

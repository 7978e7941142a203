/**
 * One worker run of a copy operation with its record in DynamoDB (progress.ts): what main.ts (the
 * Fargate task / child process) runs around copyTree.
 */
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { db } from '../core/db.js';
import { logger } from '../core/logger.js';
import { CopyLeaseLost } from './errors.js';
import { claimCopyOperation, finishCopyOperation, OperationRecordSink, recordCopyPlan, type CopyOperationRecord, type CopyProgress } from './progress.js';
import { copyTree, type CopyTreeOptions, type CopyTreeResult } from './worker.js';

export interface CopyOperationInput extends Omit<CopyTreeOptions, 'sink'> {
  client?: DynamoDBDocumentClient;
}

export type CopyOperationOutcome =
  | { status: 'completed' | 'failed' | 'cancelled'; record: CopyOperationRecord }
  /** A newer worker owns the operation; this one wrote nothing final. */
  | { status: 'superseded'; record?: undefined };

/**
 * One worker run of a copy operation, with the record in DynamoDB: claim a generation, copy (or
 * resume), record the final state. A completed or cancelled operation is not run again.
 */
export async function runCopyOperation(input: CopyOperationInput): Promise<CopyOperationOutcome> {
  const client = input.client ?? db();
  const claim = await claimCopyOperation({ operationId: input.operationId, source: input.source, destination: input.destination }, client);
  if (!claim.claimed) {
    const status = claim.record.status === 'completed' ? 'completed' : 'cancelled';
    return { status, record: claim.record };
  }
  const generation = claim.record.generation;
  const sink = new OperationRecordSink(input.operationId, generation, client);
  try {
    if (claim.record.cancelRequested) {
      const record = await finishCopyOperation(input.operationId, generation, { status: 'cancelled', progress: emptyProgress() }, client);
      return { status: 'cancelled', record };
    }
    let result: CopyTreeResult;
    try {
      result = await copyTree({ ...input, sink });
    } catch (e) {
      if (e instanceof CopyLeaseLost) throw e;
      result = { status: 'failed', error: e as Error, progress: emptyProgress(), skipped: [], ownerPreserved: false };
    }
    if (result.skipped.length > 0) await recordCopyPlan(input.operationId, generation, { skipped: result.skipped }, client);
    const record = await finishCopyOperation(
      input.operationId,
      generation,
      { status: result.status, progress: result.progress, error: result.error?.message, ownerPreserved: result.ownerPreserved },
      client,
    );
    return { status: result.status, record };
  } catch (e) {
    if (e instanceof CopyLeaseLost) {
      logger.warn('copy operation taken over by a newer worker; stopping', { operationId: input.operationId, generation });
      return { status: 'superseded' };
    }
    throw e;
  }
}

function emptyProgress(): CopyProgress {
  return { bytesTotal: 0, filesTotal: 0, bytesDone: 0, filesDone: 0, filesResumed: 0 };
}

/**
 * The copy operation record: one item in the `share` table (pk `COPY#<operationId>`, sk `COPY`)
 * that holds a copy's status, progress and cancel flag. The API (migration_get_progress) reads
 * progress from here, never from the worker's memory (upstream asks the data service process, so
 * progress is lost with that process); `ferry watch` is to read it from here too, once it exists.
 *
 * Ownership is a generation number: a worker starting (or resuming) an operation claims it by
 * incrementing `generation` in one conditional update, and every later write of that worker is
 * conditional on its generation still being current. A stale worker (an earlier task that was
 * presumed dead but is not) loses its next write, learns so from the failed condition without an
 * extra read, and stops.
 *
 * The same progress write returns the item, so the worker learns of `cancelRequested` at the
 * progress cadence for free.
 */
import { join } from 'node:path';
import { GetCommand, UpdateCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { tableName } from '../core/tables.js';
import { CopyLeaseLost } from './errors.js';
import type { SkippedEntry } from './tree.js';

export type CopyStatus = 'running' | 'completed' | 'failed' | 'cancelled';

/** At most this many skipped entries are listed in the record (the count is always exact). */
export const MAX_LISTED_SKIPPED = 100;

export interface CopyProgress {
  bytesTotal: number;
  filesTotal: number;
  bytesDone: number;
  filesDone: number;
  /** Files found finished in the journal of an earlier run and not copied again. */
  filesResumed: number;
  /** The largest file being copied right now, relative to the share root. */
  currentFile?: string;
  currentFileBytes?: number;
  currentFileSize?: number;
}

export interface CopyOperationRecord extends Partial<CopyProgress> {
  pk: string;
  sk: string;
  operationId: string;
  status: CopyStatus;
  generation: number;
  source: string;
  destination: string;
  cancelRequested?: boolean;
  error?: string;
  /** 0-100, floor of bytes done over bytes total; 100 only once completed. */
  totalProgress?: number;
  skipped?: SkippedEntry[];
  skippedCount?: number;
  /** False when the worker could not set owners (not root); files then belong to the worker. */
  ownerPreserved?: boolean;
  startedAt: string;
  updatedAt: string;
  finishedAt?: string;
}

/** Where the engine sends progress; answers whether a cancel was asked for. */
export interface ProgressSink {
  report(progress: CopyProgress): Promise<{ cancelRequested: boolean }>;
}

export function copyOperationKey(operationId: string): { pk: string; sk: string } {
  return { pk: `COPY#${operationId}`, sk: 'COPY' };
}

export function totalProgress(progress: Pick<CopyProgress, 'bytesDone' | 'bytesTotal'>, completed = false): number {
  if (completed) return 100;
  if (progress.bytesTotal <= 0) return 0;
  return Math.min(99, Math.floor((progress.bytesDone * 100) / progress.bytesTotal));
}

function progressValues(progress: CopyProgress, completed = false): Record<string, unknown> {
  return {
    ':bytesTotal': progress.bytesTotal,
    ':filesTotal': progress.filesTotal,
    ':bytesDone': progress.bytesDone,
    ':filesDone': progress.filesDone,
    ':filesResumed': progress.filesResumed,
    ':currentFile': progress.currentFile ?? null,
    ':currentFileBytes': progress.currentFileBytes ?? null,
    ':currentFileSize': progress.currentFileSize ?? null,
    ':totalProgress': totalProgress(progress, completed),
  };
}

const PROGRESS_SET =
  'bytesTotal = :bytesTotal, filesTotal = :filesTotal, bytesDone = :bytesDone, filesDone = :filesDone, filesResumed = :filesResumed, ' +
  'currentFile = :currentFile, currentFileBytes = :currentFileBytes, currentFileSize = :currentFileSize, totalProgress = :totalProgress, updatedAt = :now';

export type ClaimResult = { claimed: true; record: CopyOperationRecord } | { claimed: false; record: CopyOperationRecord };

/**
 * Claims the operation for this worker: creates the record if the orchestrator has not, or takes
 * it over from an earlier worker (a crashed one, or a failed run being retried) with the next
 * generation. A completed or cancelled operation is not claimed; the caller gets its record.
 */
export async function claimCopyOperation(
  input: { operationId: string; source: string; destination: string },
  client: DynamoDBDocumentClient = db(),
): Promise<ClaimResult> {
  const now = new Date().toISOString();
  try {
    const out = await client.send(
      new UpdateCommand({
        TableName: tableName('share'),
        Key: copyOperationKey(input.operationId),
        UpdateExpression:
          'SET #status = :running, operationId = :id, #source = :source, destination = :destination, startedAt = if_not_exists(startedAt, :now), updatedAt = :now ' +
          'ADD generation :one REMOVE #error, finishedAt',
        ConditionExpression: 'attribute_not_exists(pk) OR NOT (#status IN (:completed, :cancelled))',
        ExpressionAttributeNames: { '#status': 'status', '#source': 'source', '#error': 'error' },
        ExpressionAttributeValues: {
          ':running': 'running',
          ':id': input.operationId,
          ':source': input.source,
          ':destination': input.destination,
          ':now': now,
          ':one': 1,
          ':completed': 'completed',
          ':cancelled': 'cancelled',
        },
        ReturnValues: 'ALL_NEW',
      }),
    );
    return { claimed: true, record: out.Attributes as CopyOperationRecord };
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    // Rare (only a finished operation refuses a claim), so a plain read beats unmarshalling the
    // raw item the failed condition returns.
    return { claimed: false, record: (await getCopyOperation(input.operationId, client))! };
  }
}

function leaseLost(e: unknown, operationId: string, generation: number): never {
  if (isConditionFailure(e)) {
    // The failed condition returns the item in raw (marshalled) form, even through the document client.
    const raw = (e as { Item?: { generation?: { N?: string } } }).Item?.generation?.N;
    throw new CopyLeaseLost(operationId, generation, raw === undefined ? undefined : Number(raw));
  }
  throw e;
}

/** Writes progress if this worker still owns the operation; returns the cancel flag. */
export async function recordCopyProgress(
  operationId: string,
  generation: number,
  progress: CopyProgress,
  client: DynamoDBDocumentClient = db(),
): Promise<{ cancelRequested: boolean }> {
  try {
    const out = await client.send(
      new UpdateCommand({
        TableName: tableName('share'),
        Key: copyOperationKey(operationId),
        UpdateExpression: `SET ${PROGRESS_SET}`,
        ConditionExpression: 'generation = :generation AND #status = :running',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ...progressValues(progress), ':now': new Date().toISOString(), ':generation': generation, ':running': 'running' },
        ReturnValues: 'ALL_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return { cancelRequested: out.Attributes?.cancelRequested === true };
  } catch (e) {
    return leaseLost(e, operationId, generation);
  }
}

/** Records the plan's notes (skipped special files) once, after the walk. */
export async function recordCopyPlan(
  operationId: string,
  generation: number,
  plan: { skipped: SkippedEntry[] },
  client: DynamoDBDocumentClient = db(),
): Promise<void> {
  try {
    await client.send(
      new UpdateCommand({
        TableName: tableName('share'),
        Key: copyOperationKey(operationId),
        UpdateExpression: 'SET skipped = :skipped, skippedCount = :skippedCount',
        ConditionExpression: 'generation = :generation',
        ExpressionAttributeValues: { ':skipped': plan.skipped.slice(0, MAX_LISTED_SKIPPED), ':skippedCount': plan.skipped.length, ':generation': generation },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
  } catch (e) {
    leaseLost(e, operationId, generation);
  }
}

/** The final state: completed, failed (with the error) or cancelled. */
export async function finishCopyOperation(
  operationId: string,
  generation: number,
  outcome: { status: Exclude<CopyStatus, 'running'>; progress: CopyProgress; error?: string; ownerPreserved?: boolean },
  client: DynamoDBDocumentClient = db(),
): Promise<CopyOperationRecord> {
  const now = new Date().toISOString();
  try {
    const out = await client.send(
      new UpdateCommand({
        TableName: tableName('share'),
        Key: copyOperationKey(operationId),
        UpdateExpression: `SET ${PROGRESS_SET}, #status = :status, finishedAt = :now, #error = :error, ownerPreserved = :ownerPreserved`,
        ConditionExpression: 'generation = :generation',
        ExpressionAttributeNames: { '#status': 'status', '#error': 'error' },
        ExpressionAttributeValues: {
          ...progressValues(outcome.progress, outcome.status === 'completed'),
          ':now': now,
          ':status': outcome.status,
          ':error': outcome.error ?? null,
          ':ownerPreserved': outcome.ownerPreserved ?? null,
          ':generation': generation,
        },
        ReturnValues: 'ALL_NEW',
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return out.Attributes as CopyOperationRecord;
  } catch (e) {
    return leaseLost(e, operationId, generation);
  }
}

/**
 * Asks the worker to stop (migration_cancel). The worker sees the flag at its next progress write
 * and stops within the file it is copying. Returns the record, or undefined if there is none.
 */
export async function requestCopyCancel(operationId: string, client: DynamoDBDocumentClient = db()): Promise<CopyOperationRecord | undefined> {
  try {
    const out = await client.send(
      new UpdateCommand({
        TableName: tableName('share'),
        Key: copyOperationKey(operationId),
        UpdateExpression: 'SET cancelRequested = :true, updatedAt = :now',
        ConditionExpression: 'attribute_exists(pk)',
        ExpressionAttributeValues: { ':true': true, ':now': new Date().toISOString() },
        ReturnValues: 'ALL_NEW',
      }),
    );
    return out.Attributes as CopyOperationRecord;
  } catch (e) {
    if (isConditionFailure(e)) return undefined;
    throw e;
  }
}

export async function getCopyOperation(operationId: string, client: DynamoDBDocumentClient = db()): Promise<CopyOperationRecord | undefined> {
  const out = await client.send(new GetCommand({ TableName: tableName('share'), Key: copyOperationKey(operationId), ConsistentRead: true }));
  return out.Item as CopyOperationRecord | undefined;
}

/**
 * The record as manila's `migration_get_progress` details (§1.5): total_progress plus the current
 * file and its progress. Upstream names the file by its path at the destination
 * (`Copy.current_copy['file_path']`): the destination as the data node mounted it, which only the
 * copy worker knows to be a path. Unlike upstream, a failed copy reports how far it got, not 100.
 */
export function manilaCopyProgress(record: CopyOperationRecord): { total_progress: number; current_file_path?: string; current_file_progress?: number } {
  const out: { total_progress: number; current_file_path?: string; current_file_progress?: number } = {
    total_progress: record.status === 'completed' ? 100 : (record.totalProgress ?? 0),
  };
  if (record.status === 'running' && record.currentFile) {
    out.current_file_path = join(record.destination, record.currentFile);
    out.current_file_progress = record.currentFileSize ? Math.floor(((record.currentFileBytes ?? 0) * 100) / record.currentFileSize) : 0;
  }
  return out;
}

/** A ProgressSink backed by the operation record, for one worker generation. */
export class OperationRecordSink implements ProgressSink {
  writes = 0;
  constructor(
    readonly operationId: string,
    readonly generation: number,
    private readonly client: DynamoDBDocumentClient = db(),
  ) {}
  async report(progress: CopyProgress): Promise<{ cancelRequested: boolean }> {
    this.writes++;
    return recordCopyProgress(this.operationId, this.generation, progress, this.client);
  }
}

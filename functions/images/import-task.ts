/**
 * The record of a web-download import on its image (Glance's api_image_import task and its lock,
 * `os_glance_import_task`): every change is one conditional write on the image item.
 *
 * - beginImport (the image API): queued -> importing with a new task `processing`. The write is
 *   the import's intent and its lock: it succeeds only on a queued image no import holds, so of two
 *   concurrent imports one wins and the other gets Glance's 409.
 * - finishImport (the machine's Download step): importing -> active with the bytes' size and
 *   digests, the task `success`, only while this task holds the image.
 * - failImport (the machine's Failed step, the API when it cannot start the machine, the
 *   reconciler): importing -> queued with the task `failure` and its reason, only while this task
 *   holds the image; Glance's revert of a failed web-download (base_download.py) does the same.
 *
 * Each is idempotent: a write that finds its own result already there is a success.
 */
import { randomUUID } from 'node:crypto';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { db, isConditionFailure } from '../core/db.js';
import { Conflict } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { findImage, listImages, type ImageDigests } from '../servers/images.js';
import { imageKey, type Image, type ImageImportTask } from '../servers/model.js';
import { imageNotFound } from './repo.js';

const apiTable = () => tableName('compute-api');
const now = () => new Date().toISOString();

/** The import's own record says it no longer holds the image (deleted, or put back by the reconciler): the machine stops. */
export class ImportAborted extends Conflict {}

/** The image whose condition failed, from ReturnValuesOnConditionCheckFailure (undefined: no item). */
function oldImage(e: unknown): Image | undefined {
  const item = (e as { Item?: Record<string, never> }).Item;
  return item ? (unmarshall(item) as Image) : undefined;
}

/** Glance's refusals of an import on an image in the wrong state (glance/api/v2/images.py import_image). */
export function importRefusal(image: Image): Conflict {
  if (image.status === 'active') return new Conflict('Image with status active cannot be target for import');
  return new Conflict("Image needs to be in 'queued' state to use 'web-download' method");
}

export interface ImportRequest {
  imageId: string;
  uri: string;
  ownerProjectId: string | null;
  userId: string;
}

/**
 * queued -> importing with a new import task: the intent and the lock, one conditional write.
 * @throws NotFound (no such image, or deleted), Conflict (Glance's 409s: not queued, or held)
 */
export async function beginImport(request: ImportRequest): Promise<ImageImportTask> {
  const at = now();
  // The task's id is minted here once, as a new resource's id is, and recorded in the same write as
  // the lock: the execution (image-import-<id>) and every later step are named from the record, so
  // a step that runs again finds the same id.
  const task: ImageImportTask = { id: randomUUID(), status: 'processing', method: 'web-download', uri: request.uri, message: '', ownerProjectId: request.ownerProjectId, userId: request.userId, createdAt: at, updatedAt: at };
  try {
    await db().send(
      new UpdateCommand({
        TableName: apiTable(),
        Key: imageKey(request.imageId),
        UpdateExpression: 'SET #status = :importing, importTask = :task, updatedAt = :at',
        ConditionExpression: 'attribute_exists(pk) AND #status = :queued AND (attribute_not_exists(importTask) OR importTask.#taskStatus <> :processing)',
        ExpressionAttributeNames: { '#status': 'status', '#taskStatus': 'status' },
        ExpressionAttributeValues: { ':importing': 'importing', ':queued': 'queued', ':processing': 'processing', ':task': task, ':at': at },
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    const image = oldImage(e);
    if (!image || image.status === 'deleted') throw imageNotFound(request.imageId);
    throw importRefusal(image);
  }
  return task;
}

/** Sets the image's status and its task's outcome, while `taskId` holds the image (importing). */
async function endImport(imageId: string, taskId: string, to: 'active' | 'queued', outcome: Pick<ImageImportTask, 'status' | 'message'>, digests?: ImageDigests): Promise<Image | undefined> {
  const at = now();
  const values: Record<string, unknown> = { ':to': to, ':importing': 'importing', ':task': taskId, ':outcome': outcome.status, ':message': outcome.message, ':at': at };
  let sets = '#status = :to, importTask.#taskStatus = :outcome, importTask.#message = :message, importTask.updatedAt = :at, updatedAt = :at';
  if (digests) {
    sets += ', sizeBytes = :size, sha256 = :sha256, md5 = :md5, sha512 = :sha512';
    Object.assign(values, { ':size': digests.sizeBytes, ':sha256': digests.sha256, ':md5': digests.md5, ':sha512': digests.sha512 });
  }
  try {
    await db().send(
      new UpdateCommand({
        TableName: apiTable(),
        Key: imageKey(imageId),
        UpdateExpression: `SET ${sets}`,
        ConditionExpression: 'attribute_exists(pk) AND #status = :importing AND importTask.#taskId = :task',
        ExpressionAttributeNames: { '#status': 'status', '#taskStatus': 'status', '#taskId': 'id', '#message': 'message' },
        ExpressionAttributeValues: values,
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      }),
    );
    return undefined;
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    return oldImage(e) ?? ({ id: imageId, status: 'deleted' } as Image);
  }
}

/**
 * importing -> active with the bytes' size and digests, the task `success`. Idempotent: an image
 * this task already made active is a success.
 * @throws ImportAborted when the task no longer holds the image (deleted, or put back to queued)
 */
export async function finishImport(imageId: string, taskId: string, digests: ImageDigests): Promise<void> {
  const found = await endImport(imageId, taskId, 'active', { status: 'success', message: '' }, digests);
  if (!found) return;
  if (found.status === 'active' && found.importTask?.id === taskId && found.importTask.status === 'success') return;
  throw new ImportAborted(`Image ${imageId} is no longer held by import task ${taskId} (status ${found.status}); the import stops.`);
}

/**
 * What failImport found: `failed`: it put the image back to queued (or had already); `gone`: the
 * image was deleted meanwhile; `not-held`: another import or upload holds it, or it is active.
 */
export type FailOutcome = 'failed' | 'gone' | 'not-held';

/** importing -> queued with the task `failure` and `reason` (Glance's task message), while this task holds the image. */
export async function failImport(imageId: string, taskId: string, reason: string): Promise<FailOutcome> {
  const found = await endImport(imageId, taskId, 'queued', { status: 'failure', message: reason });
  if (!found) return 'failed';
  if (found.status === 'deleted') return 'gone';
  if (found.status === 'queued' && found.importTask?.id === taskId && found.importTask.status === 'failure') return 'failed';
  return 'not-held';
}

/** The image if `taskId` holds it (importing); why not otherwise. */
export async function heldImage(imageId: string, taskId: string): Promise<{ image: Image } | { image?: Image; reason: string }> {
  const image = await findImage(imageId);
  if (!image || image.status === 'deleted') return { reason: `image ${imageId} was deleted` };
  if (image.status !== 'importing' || image.importTask?.id !== taskId) return { image, reason: `image ${imageId} is ${image.status}, held by ${image.importTask?.id === taskId ? 'no import' : `import task ${image.importTask?.id ?? 'none'}`}` };
  return { image };
}

/** Images an import holds since before `before` (the reconciler asks the machine whether it still runs). */
export async function importsBegunBefore(before: Date): Promise<(Image & { importTask: ImageImportTask })[]> {
  return (await listImages('', true)).filter((i): i is Image & { importTask: ImageImportTask } => i.status === 'importing' && i.importTask !== undefined && Date.parse(i.importTask.createdAt) < before.getTime());
}

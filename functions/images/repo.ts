/**
 * Glance's writes and visibility rules over Ferry's image store (functions/servers/images.ts keeps
 * the records and the bytes). Every change is a write conditional on what was read: an update on
 * the record's `updatedAt` (a concurrent change makes it fail, and it is re-applied to a fresh
 * read), a delete on the image not being protected.
 */
import { DeleteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, withRetries } from '../core/db.js';
import type { AuthContext } from '../core/auth.js';
import { ConcurrentModification, FerryError, Forbidden, NotFound } from '../core/errors.js';
import { tableName } from '../core/tables.js';
import { deleteImageObject, findImage } from '../servers/images.js';
import { imageKey, type Image } from '../servers/model.js';

const apiTable = () => tableName('compute-api');

/** Glance's 404 for an image the caller may not see, or that is not there. */
export const imageNotFound = (id: string) => new NotFound(`No image found with ID ${id}`);

/**
 * Whether the caller sees the image (Glance's `is_image_visible`): admins all; everyone public
 * and community images; the owner its own. Shared images of other projects need a membership,
 * which Ferry does not keep (docs/compatibility.md).
 */
export function visibleTo(image: Image, auth: AuthContext): boolean {
  if (image.status === 'deleted') return false;
  if (auth.isAdmin) return true;
  return image.visibility === 'public' || image.visibility === 'community' || image.ownerProjectId === auth.projectId;
}

/**
 * Whether the image is in the caller's default list: Glance leaves community images out unless the
 * caller owns them (or asks for `visibility=community`).
 */
export function listedFor(image: Image, auth: AuthContext, visibility: string | null): boolean {
  if (!visibleTo(image, auth)) return false;
  if (visibility) return visibility === 'all' || image.visibility === visibility;
  return image.visibility !== 'community' || image.ownerProjectId === auth.projectId;
}

/** The image if the caller sees it. @throws NotFound otherwise */
export async function visibleImage(id: string, auth: AuthContext): Promise<Image> {
  const image = await findImage(id);
  if (!image || !visibleTo(image, auth)) throw imageNotFound(id);
  return image;
}

/** The image if the caller may change it (owner or admin): a visible image of another project is 403, as Glance answers. */
export async function ownImage(id: string, auth: AuthContext): Promise<Image> {
  const image = await visibleImage(id, auth);
  if (!auth.isAdmin && image.ownerProjectId !== auth.projectId) throw new Forbidden('You are not permitted to modify this image.');
  return image;
}

/**
 * Applies `change` (pure: the next image from the current one, or throws a refusal) to a fresh read
 * and writes it conditional on the record's `updatedAt` being the one read; a lost race re-reads.
 */
export async function changeImage(id: string, auth: AuthContext, change: (image: Image) => Image): Promise<Image> {
  return withRetries(
    async () => {
      const current = await ownImage(id, auth);
      const next = { ...change(current), updatedAt: new Date().toISOString() };
      try {
        await db().send(
          new UpdateCommand({
            TableName: apiTable(),
            Key: imageKey(id),
            UpdateExpression:
              'SET #name = :name, gsi1sk = :name, visibility = :vis, minDisk = :minDisk, minRam = :minRam, diskFormat = :df, containerFormat = :cf, properties = :props, tags = :tags, #protected = :prot, updatedAt = :at',
            ConditionExpression: 'updatedAt = :read AND #status <> :deleted',
            ExpressionAttributeNames: { '#name': 'name', '#protected': 'protected', '#status': 'status' },
            ExpressionAttributeValues: {
              ':name': next.name,
              ':vis': next.visibility,
              ':minDisk': next.minDisk,
              ':minRam': next.minRam,
              ':df': next.diskFormat,
              ':cf': next.containerFormat,
              ':props': next.properties,
              ':tags': next.tags ?? [],
              ':prot': next.protected ?? false,
              ':at': next.updatedAt,
              ':read': current.updatedAt,
              ':deleted': 'deleted',
            },
          }),
        );
      } catch (e) {
        if (isConditionFailure(e)) throw new ConcurrentModification(`Image ${id}`, e);
        throw e;
      }
      return next;
    },
    { attempts: 10, retryable: (e) => e instanceof ConcurrentModification },
  );
}

/**
 * Glance's delete: refused for a protected image (403); otherwise the record is marked deleted
 * (conditional on not being protected, so a concurrent `protected: true` wins), then the bytes
 * and the record go. A crash after the mark leaves a record no one sees and the next delete of the
 * same id finishes it.
 */
export async function deleteGlanceImage(id: string, auth: AuthContext): Promise<void> {
  const image = await findImage(id);
  const finishing = image?.status === 'deleted' && (auth.isAdmin || image.ownerProjectId === auth.projectId);
  if (!finishing) {
    const own = await ownImage(id, auth);
    if (own.protected) throw new Forbidden(`Image ${id} is protected and cannot be deleted.`);
    try {
      await db().send(
        new UpdateCommand({
          TableName: apiTable(),
          Key: imageKey(id),
          UpdateExpression: 'SET #status = :deleted, updatedAt = :at',
          ConditionExpression: 'attribute_exists(pk) AND (attribute_not_exists(#protected) OR #protected = :false)',
          ExpressionAttributeNames: { '#status': 'status', '#protected': 'protected' },
          ExpressionAttributeValues: { ':deleted': 'deleted', ':at': new Date().toISOString(), ':false': false },
        }),
      );
    } catch (e) {
      if (isConditionFailure(e)) throw new FerryError(409, 'conflictingRequest', `Image ${id} changed while it was being deleted; try again.`);
      throw e;
    }
  }
  await deleteImageObject(id);
  await db().send(new DeleteCommand({ TableName: apiTable(), Key: imageKey(id), ConditionExpression: '#status = :deleted', ExpressionAttributeNames: { '#status': 'status' }, ExpressionAttributeValues: { ':deleted': 'deleted' } })).catch((e: unknown) => {
    if (!isConditionFailure(e)) throw e;
  });
}

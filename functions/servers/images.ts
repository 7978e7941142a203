/**
 * Images (Glance's role for Ferry): the bytes in S3 under `images/<id>`, the record in the
 * `compute-api` table. An image moves queued -> saving -> active; every status change is a write
 * conditional on the status it leaves, so two callers never both believe they finished an upload.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { DeleteCommand, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db, isConditionFailure, queryAll } from '../core/db.js';
import { BadRequest, Conflict, NotFound } from '../core/errors.js';
import { bucket, s3, s3Sdk } from '../core/s3.js';
import { tableName } from '../core/tables.js';
import { stableUuid } from '../compute/model.js';
import type { TransactItem } from '../compute/repo.js';
import type { ImageSource } from '../drivers/compute/driver.js';
import { imageKey, SERVER_GSI, type Image } from './model.js';

const KEY_ATTRIBUTES = new Set(['pk', 'sk', 'gsi1pk', 'gsi1sk']);
const apiTable = () => tableName('compute-api');

export const imageObjectKey = (id: string) => `images/${id}`;

function strip(item: Record<string, unknown>): Image {
  return Object.fromEntries(Object.entries(item).filter(([k]) => !KEY_ATTRIBUTES.has(k))) as unknown as Image;
}

const notFound = (id: string) => new NotFound(`Image ${id} could not be found.`);

export interface NewImage {
  name: string;
  ownerProjectId: string | null;
  visibility: Image['visibility'];
  properties: Record<string, string>;
  minDisk?: number;
  minRam?: number;
  diskFormat?: string;
  containerFormat?: string;
  id?: string;
  tags?: string[];
  protected?: boolean;
}

/** A new image's record in `status` (no bytes yet). */
function newImage(input: NewImage, status: 'queued' | 'saving'): Image {
  const at = new Date().toISOString();
  const id = input.id ?? randomUUID();
  return {
    id,
    name: input.name,
    status,
    sizeBytes: 0,
    minDisk: input.minDisk ?? 0,
    minRam: input.minRam ?? 0,
    diskFormat: input.diskFormat ?? 'raw',
    containerFormat: input.containerFormat ?? 'bare',
    visibility: input.visibility,
    ownerProjectId: input.ownerProjectId,
    properties: input.properties,
    objectKey: imageObjectKey(id),
    sha256: null,
    ...(input.tags ? { tags: input.tags } : {}),
    ...(input.protected ? { protected: true } : {}),
    createdAt: at,
    updatedAt: at,
  };
}

/** The Put of a new image's record, refused when an image with its id exists. */
function newImagePut(image: Image): TransactItem & { Put: object } {
  return {
    Put: {
      TableName: apiTable(),
      Item: { ...imageKey(image.id), gsi1pk: SERVER_GSI.images, gsi1sk: image.name, ...image },
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  };
}

/**
 * Records a new image (queued, no bytes yet).
 * @throws Conflict when an image with that id exists (Glance's 409 on a duplicate id).
 */
export async function createImageRecord(input: NewImage): Promise<Image> {
  const image = newImage(input, 'queued');
  try {
    await db().send(new PutCommand(newImagePut(image).Put));
  } catch (e) {
    if (isConditionFailure(e)) throw new Conflict(`Image with identifier ${image.id} already exists!`);
    throw e;
  }
  return image;
}

/**
 * The record of an image whose bytes the caller uploads at once (a server snapshot's), as an item
 * of the caller's own transaction: made straight in `saving`, so the upload that follows skips
 * its move there (uploadImage `recordSaving`); the transaction is refused if the id exists.
 */
export function savingImagePut(input: NewImage & { id: string }): TransactItem {
  return newImagePut(newImage(input, 'saving'));
}

/** The image record; undefined only when there is none (a failed read throws). */
export async function findImage(id: string): Promise<Image | undefined> {
  // An id longer than Glance's column names no image (and is no valid DynamoDB key).
  if (id.length > 255) return undefined;
  const out = await db().send(new GetCommand({ TableName: apiTable(), Key: imageKey(id), ConsistentRead: true }));
  return out.Item ? strip(out.Item) : undefined;
}

/** @throws NotFound */
export async function getImage(id: string): Promise<Image> {
  const image = await findImage(id);
  if (!image) throw notFound(id);
  return image;
}

/** The images a project sees: public ones and its own; an admin sees all. By name. */
export async function listImages(projectId: string, isAdmin: boolean): Promise<Image[]> {
  const items = await queryAll({ TableName: apiTable(), IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': SERVER_GSI.images } });
  // A `deleted` record is one the image API's delete has not finished removing (functions/images/repo.ts): gone for everyone.
  return items.map(strip).filter((i) => i.status !== 'deleted' && (isAdmin || i.visibility === 'public' || i.ownerProjectId === projectId));
}

/**
 * Moves the status from one of `from` to `to` (plus `extra` fields): the image as written, or
 * undefined when the status was none of `from` (or there is no image).
 */
async function transition(id: string, from: Image['status'][], to: Image['status'], extra: Partial<Image> = {}): Promise<Image | undefined> {
  const fields: Record<string, unknown> = { ...extra, status: to, updatedAt: new Date().toISOString() };
  const names: Record<string, string> = {};
  const values: Record<string, unknown> = {};
  const sets = Object.entries(fields).map(([k, v], n) => {
    names[`#f${n}`] = k;
    values[`:f${n}`] = v;
    return `#f${n} = :f${n}`;
  });
  from.forEach((s, n) => (values[`:from${n}`] = s));
  names['#status'] = 'status';
  try {
    const out = await db().send(
      new UpdateCommand({
        TableName: apiTable(),
        Key: imageKey(id),
        UpdateExpression: `SET ${sets.join(', ')}`,
        ConditionExpression: `attribute_exists(pk) AND #status IN (${from.map((_, n) => `:from${n}`).join(', ')})`,
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: values,
        // The record as written answers the caller: no read after the write.
        ReturnValues: 'ALL_NEW',
      }),
    );
    return strip(out.Attributes!);
  } catch (e) {
    if (isConditionFailure(e)) return undefined;
    throw e;
  }
}

/** Image bytes this process stored, since the start or the last reset (tests and benches count a move's cost). */
let storedBytes = 0;
export const imageBytesStored = (): number => storedBytes;
export function resetImageBytesStored(): void {
  storedBytes = 0;
}

function sha256Of(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Every byte of a stream, in memory (a body of unknown length, which PutObject cannot stream). */
export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/**
 * Stores the bytes of an image and makes it active with their size and sha-256 (computed while
 * the bytes stream to S3). A retried upload of a queued or saving image uploads again; a re-upload
 * of an active image with the same bytes is a no-op, with other bytes a Conflict (Glance refuses to
 * replace the data of an active image). A failed upload puts the image back to queued.
 * @throws NotFound, Conflict, BadRequest (fewer or more bytes than `sizeBytes`).
 */
export async function uploadImage(id: string, body: Readable | Uint8Array, sizeBytes?: number, options: UploadOptions = {}): Promise<Image> {
  // A body of unknown length is read whole before anything else: first make sure it is for an image.
  if (body instanceof Readable && sizeBytes === undefined) await getImage(id);
  // PutObject needs the length up front (no multipart helper in the dependencies): a stream of
  // unknown size is read into memory first, which images of Ferry's sizes allow.
  const data: Readable | Uint8Array = body instanceof Readable && sizeBytes === undefined ? await readAll(body) : body;
  const length = data instanceof Readable ? sizeBytes! : data.byteLength;

  const shaOfData = async () => sha256Of(data instanceof Readable ? await readAll(data) : data);

  // Straight to saving, one conditional write (a snapshot's upload is on every shelve and
  // cross-cell resize); only a refused write reads the record, to tell an active image (the same
  // bytes: done; others: Conflict) from an upload in progress or no image (NotFound).
  // The disk_format of bytes Nova made (a snapshot) is set with them, as Nova's image update does.
  if (!options.recordSaving && !(await transition(id, ['queued', 'saving'], 'saving', options.diskFormat ? { diskFormat: options.diskFormat } : {}))) return settledUpload(id, await shaOfData());

  let digests: ImageDigests;
  try {
    digests = await putImageObject(id, data, length);
  } catch (e) {
    await transition(id, ['saving'], 'queued');
    throw e;
  }
  return (await transition(id, ['saving'], 'active', { ...digests })) ?? settledUpload(id, digests.sha256);
}

export interface UploadOptions {
  /** The bytes' disk_format, recorded with them (a snapshot's). */
  diskFormat?: string;
  /**
   * The caller made the record in `saving`, with this disk_format, in this same call (savingImagePut):
   * no write moves it there first. Never for a record read or made earlier (a re-run), which may
   * be active already and must not get other bytes.
   */
  recordSaving?: boolean;
}

/** What an image's bytes are: their count and Glance's three digests, computed while they stream to S3. */
export interface ImageDigests {
  sizeBytes: number;
  sha256: string;
  md5: string;
  sha512: string;
}

/**
 * Streams `length` bytes to `images/<id>`, hashing them on the way; touches no record. A body
 * longer or shorter than `length` fails (BadRequest) and aborts the PUT, as does a source stream
 * that errors (its error is thrown): a single PutObject stores all of the object or none of it.
 */
export async function putImageObject(id: string, data: Readable | Uint8Array, length: number): Promise<ImageDigests> {
  const hash = createHash('sha256');
  // Glance's checksum (MD5) and os_hash_value (SHA-512), computed in the same pass.
  const md5 = createHash('md5');
  const sha512 = createHash('sha512');
  let counted = 0;
  // A body longer or shorter than the length announced would leave S3 waiting for bytes that never
  // come (or cut it off silently): the count fails the stream, which aborts the PUT.
  const wrongLength = () => new BadRequest(`Image ${id}: ${counted} bytes received, ${length} expected.`);
  const hashing = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      md5.update(chunk);
      sha512.update(chunk);
      counted += chunk.length;
      done(counted > length ? wrongLength() : null, chunk);
    },
    flush(done) {
      done(counted < length ? wrongLength() : null);
    },
  });
  const source = data instanceof Readable ? data : Readable.from([data]);
  const counting = source.pipe(hashing);
  // The SDK does not watch its body for errors: a failed stream aborts the request here.
  const abort = new AbortController();
  source.on('error', (e) => counting.destroy(e));
  counting.on('error', () => abort.abort());
  try {
    await (await s3()).send(new (await s3Sdk()).PutObjectCommand({ Bucket: bucket(), Key: imageObjectKey(id), Body: counting, ContentLength: length }), { abortSignal: abort.signal });
    if (counted !== length) throw wrongLength();
  } catch (e) {
    throw counting.errored ?? e;
  }
  storedBytes += length;
  return { sizeBytes: length, sha256: hash.digest('hex'), md5: md5.digest('hex'), sha512: sha512.digest('hex') };
}

/** Removes `images/<id>` (S3 answers a delete of a missing key with success). */
export async function deleteImageObject(id: string): Promise<void> {
  await (await s3()).send(new (await s3Sdk()).DeleteObjectCommand({ Bucket: bucket(), Key: imageObjectKey(id) }));
}

/**
 * The upload's move was refused: an active image (a re-upload, or a concurrent upload that
 * finished first) is fine with the same bytes; anything else is a Conflict. @throws NotFound
 */
async function settledUpload(id: string, sha256: string): Promise<Image> {
  const now = await getImage(id);
  if (now.status === 'active') {
    if (sha256 === now.sha256) return now;
    throw new Conflict(`Image ${id} is active; its data cannot be replaced.`);
  }
  throw new Conflict(`Image ${id} is being uploaded by another request (status ${now.status}).`);
}

/** The bytes of an active image. @throws NotFound, Conflict (not active) */
export async function openImage(id: string): Promise<Readable> {
  const image = await getImage(id);
  if (image.status !== 'active') throw new Conflict(`Image ${id} has no data (status ${image.status}).`);
  return openImageObject(image);
}

/** The object of an image read as active. @throws NotFound when the object is gone */
async function openImageObject(image: Pick<Image, 'id' | 'objectKey'>): Promise<Readable> {
  try {
    const out = await (await s3()).send(new (await s3Sdk()).GetObjectCommand({ Bucket: bucket(), Key: image.objectKey }));
    return out.Body as Readable;
  } catch (e) {
    if ((e as { name?: string }).name === 'NoSuchKey') throw notFound(image.id);
    throw e;
  }
}

/**
 * The compute driver's view of an image: opened when the driver reads it. A record the caller read
 * as active (every spawn's step reads it just before) is opened as it is, without reading it again
 * (one DynamoDB request fewer per spawn; an image deleted since is NotFound from S3); any other is
 * read again at open, and must be active then.
 */
export function imageSourceFor(image: Pick<Image, 'id' | 'diskFormat'> & Partial<Pick<Image, 'status' | 'objectKey'>>): ImageSource & { stream: () => Promise<Readable> } {
  const { status, objectKey } = image;
  return { stream: () => (status === 'active' && objectKey ? openImageObject({ id: image.id, objectKey }) : openImage(image.id)), diskFormat: image.diskFormat };
}

/** Deletes the bytes, then the record; either already gone is fine. */
export async function deleteImage(id: string): Promise<void> {
  await deleteImageObject(id);
  await db().send(new DeleteCommand({ TableName: apiTable(), Key: imageKey(id) }));
}

// ---------------------------------------------------------------------------------------------
// Seed

export const SANDBOX_IMAGES = {
  cirrosTiny: { id: stableUuid('image:cirros-tiny'), name: 'cirros-tiny', sizeBytes: 256 * 1024 },
  ferryTiny: { id: stableUuid('image:ferry-tiny'), name: 'ferry-tiny', sizeBytes: 384 * 1024 },
} as const;

/** Deterministic pseudo-random bytes (xorshift32 seeded from the name): the same image on every seed. */
export function deterministicBytes(name: string, size: number): Uint8Array {
  let x = createHash('sha256').update(name).digest().readUInt32LE(0) || 1;
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/** Seeds the sandbox's public images; an image already active is left as it is. */
export async function seedImages(): Promise<Image[]> {
  const seeded: Image[] = [];
  for (const s of Object.values(SANDBOX_IMAGES)) {
    try {
      await createImageRecord({ id: s.id, name: s.name, ownerProjectId: null, visibility: 'public', properties: {} });
    } catch (e) {
      if (!(e instanceof Conflict)) throw e;
    }
    const image = await getImage(s.id);
    seeded.push(image.status === 'active' ? image : await uploadImage(s.id, deterministicBytes(s.name, s.sizeBytes)));
  }
  return seeded;
}

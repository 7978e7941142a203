/**
 * The volume transfer entity (Cinder's transfers table, C/transfer/api.py) and its rules. A
 * transfer offers a volume (and, unless `no_snapshots`, its snapshots) to whoever presents its
 * auth key; only the key's HMAC is stored (upstream's salt + crypt_hash), the key itself is
 * answered once, by create. Each rule here is the condition its write in repo.ts carries.
 *
 * Layout in the volume table: pk `XFER#<id>`, sk `XFER`, gsi1pk `PROJ#<source project>#XFER`,
 * gsi1sk `<createdAt>#<id>`. An accepted or deleted transfer's record is removed (upstream
 * soft-deletes it; a deleted transfer is not listed there either).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { BadRequest, FerryError, InvalidVolume, NotFound } from '../core/errors.js';
import type { Volume } from '../volumes/model.js';
import type { Snapshot } from '../snapshots/model.js';

export interface Transfer {
  id: string;
  volumeId: string;
  sourceProjectId: string;
  name: string | null;
  salt: string;
  cryptHash: string;
  noSnapshots: boolean;
  createdAt: string;
  version: number;
}

export const transferKey = (id: string) => ({ pk: `XFER#${id}`, sk: 'XFER' });
export const transferGsi1 = (t: Pick<Transfer, 'sourceProjectId' | 'createdAt' | 'id'>) => ({ gsi1pk: `PROJ#${t.sourceProjectId}#XFER`, gsi1sk: `${t.createdAt}#${t.id}` });
export const transferNotFound = (id: string) => new NotFound(`Transfer ${id} could not be found.`);

/** The status a volume shows while offered. */
export const AWAITING = 'awaiting-transfer' as const;

/** `_get_random_string`: hex of sha224 over random bytes (volume_transfer_salt_length 8, key_length 16). */
export function randomHex(length: number): string {
  let s = '';
  while (s.length < length) s += createHash('sha224').update(randomBytes(255)).digest('hex');
  return s.slice(0, length);
}

/** `_get_crypt_hash`: HMAC-SHA1 of the auth key under the salt, hex. */
export const cryptHash = (salt: string, authKey: string) => createHmac('sha1', salt).update(authKey).digest('hex');

export function authKeyMatches(t: Pick<Transfer, 'salt' | 'cryptHash'>, authKey: string): boolean {
  const a = Buffer.from(cryptHash(t.salt, authKey));
  const b = Buffer.from(t.cryptHash);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * transfer API create: the volume must be `available` (repo.ts conditions its write on that
 * status and the version read); unless no_snapshots, each snapshot must be `available` (each a
 * ConditionCheck on its version).
 */
export function offerRefusal(v: Volume, snapshots: readonly Snapshot[], noSnapshots: boolean): FerryError | undefined {
  if (v.status !== 'available') return new InvalidVolume('status must be available');
  if (noSnapshots) return undefined;
  const busy = snapshots.find((s) => s.status !== 'available');
  return busy ? new BadRequest(`Invalid snapshot: snapshot: ${busy.id} status must be available`) : undefined;
}

/** The volume while offered: `awaiting-transfer` (transfer_create sets it in the same database transaction). */
export function offered(v: Volume, at: string): Volume {
  return { ...v, status: AWAITING, updatedAt: at };
}

/**
 * Accept: the volume must still be the one offered (`awaiting-transfer`, owned by the transfer's
 * source project), the write's condition; a volume in maintenance is refused as upstream.
 */
export function acceptRefusal(t: Transfer, v: Volume): FerryError | undefined {
  if (v.status === 'maintenance') return new InvalidVolume('Volume is in maintenance and cannot be transferred.');
  if (v.status !== AWAITING || v.projectId !== t.sourceProjectId) return new InvalidVolume(`Volume ${v.id} is not awaiting transfer ${t.id}.`);
  return undefined;
}

/**
 * Deterministic ids for effects outside DynamoDB (an attachment, an export, a guest, an image):
 * the id is derived from the operation and the step that makes the effect, so a step re-run after
 * a crash names the same effect and finds it instead of making a second one (RFC 4122 version 5:
 * a SHA-1 name-based UUID, in Ferry's own namespace).
 */
import { createHash } from 'node:crypto';

/** Ferry's namespace for name-based ids (a fixed random UUID). */
const FERRY_NAMESPACE = 'a6f1c0de-5e2b-4c6f-9d3a-1f0e7b2c4d58';

function uuidBytes(uuid: string): Buffer {
  return Buffer.from(uuid.replace(/-/g, ''), 'hex');
}

/**
 * The id of the effect named by `parts` (e.g. the request id, the step, the BDM): the same parts
 * always give the same UUID, different parts a different one.
 */
export function intentId(...parts: string[]): string {
  if (parts.length === 0 || parts.some((p) => p === '')) throw new TypeError('intentId needs non-empty parts');
  const hash = createHash('sha1').update(uuidBytes(FERRY_NAMESPACE)).update(parts.join('\u0000')).digest();
  const b = hash.subarray(0, 16);
  b[6] = (b[6]! & 0x0f) | 0x50;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const hex = b.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

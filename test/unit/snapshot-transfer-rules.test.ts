/**
 * The pure rules behind the snapshot update / metadata / os-update_snapshot_status transitions
 * (functions/snapshots/model.ts) and the volume transfer rules (functions/transfers/model.ts),
 * with upstream's wording; the integration tests drive the same rules over HTTP.
 */
import { createHmac } from 'node:crypto';
import { describe, expect, test } from 'vitest';
import { FerryError } from '../../functions/core/errors.js';
import { snapshotTransition, type Snapshot, type SnapshotStatus } from '../../functions/snapshots/model.js';
import type { Volume } from '../../functions/volumes/model.js';
import { acceptRefusal, authKeyMatches, cryptHash, offerRefusal, randomHex, type Transfer } from '../../functions/transfers/model.js';

const AT = '2024-05-01T00:00:00.000Z';
const snap = (over: Partial<Snapshot> = {}): Snapshot => ({
  id: 's1', volumeId: 'v1', projectId: 'p', userId: 'u', name: null, description: null, metadata: { a: '1' }, size: 1, status: 'available',
  backendHost: 'ferry@lvm-r', volumeBackendName: 'volume-v1', backendName: 'snapshot-s1', createdAt: AT, updatedAt: AT, version: 1, ...over,
});
const message = (x: unknown) => {
  expect(x).toBeInstanceOf(FerryError);
  return [(x as FerryError).status, (x as FerryError).message];
};

describe('snapshot update and metadata', () => {
  test('update sets only what is given; metadata merges, replaces, removes', () => {
    expect(snapshotTransition(snap({ name: 'n', description: 'd' }), { type: 'update', at: AT, name: 'm' })).toMatchObject({ name: 'm', description: 'd' });
    expect(snapshotTransition(snap(), { type: 'metadata', at: AT, set: { b: '2' } })).toMatchObject({ metadata: { a: '1', b: '2' } });
    expect(snapshotTransition(snap(), { type: 'metadata', at: AT, set: { b: '2' }, replace: true })).toMatchObject({ metadata: { b: '2' } });
    expect(snapshotTransition(snap(), { type: 'metadata', at: AT, remove: 'a' })).toMatchObject({ metadata: {} });
    expect(message(snapshotTransition(snap(), { type: 'metadata', at: AT, remove: 'x' }))).toEqual([404, 'Snapshot s1 has no metadata with key x.']);
  });
});

describe('os-update_snapshot_status (status_map)', () => {
  test.each([
    ['creating', 'creating'], ['creating', 'available'], ['creating', 'error'], ['deleting', 'deleting'], ['deleting', 'error_deleting'],
  ] as [SnapshotStatus, SnapshotStatus][])('%s -> %s', (from, to) => {
    expect(snapshotTransition(snap({ status: from }), { type: 'update-status', at: AT, status: to, progress: '10%' })).toMatchObject({ status: to, progress: '10%' });
  });
  test('from a status outside the map, or to one outside its list: 400 in upstream words', () => {
    expect(message(snapshotTransition(snap({ status: 'available' }), { type: 'update-status', at: AT, status: 'error' }))).toEqual([400, 'Snapshot status available not allowed for update_snapshot_status']);
    expect(message(snapshotTransition(snap({ status: 'creating' }), { type: 'update-status', at: AT, status: 'deleting' }))).toEqual([400, 'Provided snapshot status deleting not allowed for snapshot with status creating.']);
  });
});

describe('transfer rules', () => {
  const v = (over: Partial<Volume> = {}) => ({ id: 'v1', projectId: 'src', status: 'available', ...over }) as Volume;
  const t: Transfer = { id: 't1', volumeId: 'v1', sourceProjectId: 'src', name: null, salt: 'abcdefgh', cryptHash: '', noSnapshots: false, createdAt: AT, version: 1 };

  test('the key is kept as Cinder\'s HMAC-SHA1 under the salt; only the right key matches', () => {
    const key = randomHex(16);
    expect(key).toMatch(/^[0-9a-f]{16}$/);
    const hash = cryptHash('abcdefgh', key);
    expect(hash).toBe(createHmac('sha1', 'abcdefgh').update(key).digest('hex'));
    expect(authKeyMatches({ ...t, cryptHash: hash }, key)).toBe(true);
    expect(authKeyMatches({ ...t, cryptHash: hash }, `${key}x`)).toBe(false);
  });
  test('offer: the volume available, its snapshots available unless no_snapshots', () => {
    expect(offerRefusal(v(), [snap()], false)).toBeUndefined();
    expect(message(offerRefusal(v({ status: 'in-use' }), [], false))).toEqual([400, 'Invalid volume: status must be available']);
    expect(message(offerRefusal(v(), [snap({ status: 'creating' })], false))).toEqual([400, 'Invalid snapshot: snapshot: s1 status must be available']);
    expect(offerRefusal(v(), [snap({ status: 'creating' })], true)).toBeUndefined();
  });
  test('accept: the volume still awaiting this transfer, owned by its source project', () => {
    expect(acceptRefusal(t, v({ status: 'awaiting-transfer' }))).toBeUndefined();
    expect(acceptRefusal(t, v({ status: 'available' }))).toBeInstanceOf(FerryError);
    expect(acceptRefusal(t, v({ status: 'awaiting-transfer', projectId: 'other' }))).toBeInstanceOf(FerryError);
  });
});

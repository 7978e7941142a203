import { describe, expect, test } from 'vitest';
import { BadRequest } from '../../functions/core/errors.js';
import { MULTIATTACH_REMOVED, parseCreateBody } from '../../functions/volumes/create.js';

function refusal(body: unknown): string {
  try {
    parseCreateBody(body);
  } catch (e) {
    expect(e).toBeInstanceOf(BadRequest);
    return (e as Error).message;
  }
  throw new Error('accepted');
}

describe('POST /volumes body', () => {
  test.each([
    [undefined, "'volume' is a required property"],
    [{}, "'volume' is a required property"],
    [{ volume: 'x' }, "Invalid input for field/attribute volume. Value: x. 'x' is not of type 'object'"],
    [{ volume: {} }, "Invalid input received: Volume size 'None' must be an integer and greater than 0"],
    [{ volume: { size: 0 } }, 'Invalid input for field/attribute size. Value: 0. 0 is less than the minimum of 1'],
    [{ volume: { size: -3 } }, 'Invalid input for field/attribute size. Value: -3. -3 is less than the minimum of 1'],
    [{ volume: { size: 'abc' } }, "Invalid input for field/attribute size. Value: abc. 'abc' does not match '^[0-9]+$'"],
    [{ volume: { size: 1.5 } }, "Invalid input for field/attribute size. Value: 1.5. 1.5 is not of type 'integer', 'string'"],
    [{ volume: { size: 1, multiattach: true } }, MULTIATTACH_REMOVED],
    [{ volume: { size: 1, name: 5 } }, "Invalid input for field/attribute name. Value: 5. 5 is not of type 'string', 'null'"],
    [{ volume: { size: 1, metadata: { k: 1 } } }, "Invalid input for field/attribute k. Value: 1. 1 is not of type 'string'"],
    [{ volume: { size: 1, server_id: 'nope' } }, "Invalid input for field/attribute server_id. Value: nope. 'nope' is not a 'uuid'"],
    [{ volume: { size: 1, backup_id: 'x' } }, 'Invalid input received: Creating a volume from backup_id is not supported by Ferry.'],
    [{ volume: { size: 1, snapshot_id: 'x' } }, "Invalid input for field/attribute snapshot_id. Value: x. 'x' is not a 'uuid'"],
    [{ volume: { size: 1, source_volid: 5 } }, "Invalid input for field/attribute source_volid. Value: 5. 5 is not a 'uuid'"],
    [{ volume: { name: 'no size, no source' } }, "Invalid input received: Volume size 'None' must be an integer and greater than 0"],
  ])('%j -> %s', (body, message) => {
    expect(refusal(body)).toBe(message);
  });

  test('a digit string size, names, metadata and a server are accepted', () => {
    const r = parseCreateBody({ volume: { size: '3', name: 'n', description: 'd', metadata: { a: 'b' }, server_id: '44444444-4444-4444-4444-444444444444', multiattach: false } });
    expect(r).toEqual({ size: 3, name: 'n', description: 'd', volumeType: null, availabilityZone: null, metadata: { a: 'b' }, serverId: '44444444-4444-4444-4444-444444444444', snapshotId: null, sourceVolid: null, imageId: null });
  });
});

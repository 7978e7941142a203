import { describe, expect, test } from 'vitest';
import { BadRequest } from '../../functions/core/errors.js';
import { own } from '../../functions/core/lookup.js';
import { assertStorable, unstorableReason } from '../../functions/core/storable.js';

describe('own', () => {
  const table = { sort: 1, name: 2 };
  test('finds own keys only, never what every object inherits', () => {
    expect(own(table, 'sort')).toBe(1);
    for (const inherited of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) expect(own(table, inherited)).toBeUndefined();
  });
});

describe('storable', () => {
  test('ordinary connectors are storable', () => {
    expect(unstorableReason({ host: 'cmp1', ip: '10.0.0.1', multipath: false, mountpoint: null, lun: 0, weight: 0.5, wwpns: ['a', 'b'] })).toBeUndefined();
  });

  test.each([
    [{ host: 'h', '': {} }, /empty property name/],
    [{ host: 'h', x: 9007199254740994 }, /too large to keep exactly/],
    [{ host: 'h', x: 1e300 }, /outside the storable range/],
    [{ host: 'h', x: 1e-300 }, /outside the storable range/],
    [{ host: 'h', deep: JSON.parse('['.repeat(40) + ']'.repeat(40)) }, /nested more than 32/],
  ])('refuses %j', (value, reason) => {
    expect(unstorableReason(value, 'connector')).toMatch(reason);
    expect(() => assertStorable('connector', value)).toThrow(BadRequest);
  });
});

import { describe, expect, test } from 'vitest';
import { BadRequest } from '../../functions/core/errors.js';
import { MAX_MAP_ITEMS, extraSpecsField, metadataField } from '../../functions/volumes/validation.js';

const mapOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));

describe('maps that live in one DynamoDB item are bounded', () => {
  test('metadata: 128 items pass, 129 are a 400', () => {
    expect(metadataField({ metadata: mapOf(MAX_MAP_ITEMS) })).toHaveProperty('k127');
    expect(() => metadataField({ metadata: mapOf(MAX_MAP_ITEMS + 1) })).toThrow(BadRequest);
    expect(() => metadataField({ metadata: mapOf(MAX_MAP_ITEMS + 1) })).toThrow(/Maximum number of metadata items exceeds 128/);
  });

  test('extra specs: 128 pass, 129 are a 400', () => {
    expect(Object.keys(extraSpecsField(mapOf(MAX_MAP_ITEMS)))).toHaveLength(MAX_MAP_ITEMS);
    expect(() => extraSpecsField(mapOf(MAX_MAP_ITEMS + 1))).toThrow(/at most 128 extra specs/);
  });
});

import { describe, expect, test } from 'vitest';
import fc from 'fast-check';
import { intentId } from '../../functions/core/intents.js';

const UUID_V5 = /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('intentId: the id of an effect, derived from the operation and the step', () => {
  test('is a version-5 UUID, the same for the same parts', () => {
    const id = intentId('req-1', 'pre', 'bdm-1');
    expect(id).toMatch(UUID_V5);
    expect(intentId('req-1', 'pre', 'bdm-1')).toBe(id);
  });

  test('differs when any part differs, and parts do not run into each other', () => {
    expect(intentId('req-1', 'pre', 'bdm-1')).not.toBe(intentId('req-2', 'pre', 'bdm-1'));
    expect(intentId('req-1', 'pre', 'bdm-1')).not.toBe(intentId('req-1', 'post', 'bdm-1'));
    expect(intentId('ab', 'c')).not.toBe(intentId('a', 'bc'));
  });

  test('distinct part lists give distinct ids (property)', () => {
    const parts = fc.array(fc.string({ minLength: 1, maxLength: 12 }).filter((s) => !s.includes('\u0000')), { minLength: 1, maxLength: 4 });
    fc.assert(
      fc.property(parts, parts, (a, b) => {
        fc.pre(a.join('\u0000') !== b.join('\u0000'));
        expect(intentId(...a)).not.toBe(intentId(...b));
      }),
    );
  });

  test('refuses an empty part: an id must name its effect', () => {
    expect(() => intentId()).toThrow(TypeError);
    expect(() => intentId('req-1', '')).toThrow(TypeError);
  });
});

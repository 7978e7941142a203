/**
 * The run order of `npm test` (test/support/longest-first.ts, vitest.config.ts's sequencer): the
 * unit group before the stack tiers, the README test first of the stack tiers, the known-long
 * files longest first across tiers, the rest in the order vitest gave; every file the table names
 * exists (a renamed file would silently lose its place).
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expect, test } from 'vitest';
import { EXPECTED_SECONDS, longestFirst } from '../support/longest-first.js';

const ROOT = resolve(import.meta.dirname, '../..');

interface File {
  path: string;
  group: number;
}

const order = (files: File[]) => longestFirst(files, (f) => f.group, (f) => f.path).map((f) => f.path);

test('every file the table ranks exists', () => {
  const missing = [...EXPECTED_SECONDS.keys()].filter((p) => !existsSync(join(ROOT, p)));
  expect(missing).toEqual([]);
});

test('groups first, then the known-long files longest first across tiers, then the others as given', () => {
  const given: File[] = [
    { path: 'test/integration/volume-api.test.ts', group: 1 },
    { path: 'test/e2e/nova-foundation.test.ts', group: 1 },
    { path: 'test/integration/fuzz.test.ts', group: 1 },
    { path: 'test/unit/a.test.ts', group: 0 },
    { path: 'test/e2e/readme.test.ts', group: 1 },
    { path: 'test/infra/stack.test.ts', group: 1 },
    { path: 'test/infra/cdk-cli.test.ts', group: 1 },
    { path: 'test/unit/b.test.ts', group: 0 },
  ];
  expect(order(given)).toEqual([
    'test/unit/a.test.ts',
    'test/unit/b.test.ts',
    'test/e2e/readme.test.ts',
    'test/integration/fuzz.test.ts',
    'test/infra/cdk-cli.test.ts',
    'test/e2e/nova-foundation.test.ts',
    'test/integration/volume-api.test.ts',
    'test/infra/stack.test.ts',
  ]);
});

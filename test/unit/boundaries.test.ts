/**
 * The import rules of .dependency-cruiser.cjs hold on the code (zero violations), and they can
 * fail: a fixture tree with an upward import and a cycle behind a dynamic import is refused.
 */
import { createRequire } from 'node:module';
import { describe, expect, test } from 'vitest';
import { cruise, type ICruiseResult, type IConfiguration } from 'dependency-cruiser';

const require = createRequire(import.meta.url);
const rules = require('../../.dependency-cruiser.cjs') as IConfiguration;

async function violations(paths: string[]): Promise<string[]> {
  // Prepare
  const { forbidden, options } = rules;
  // Act
  const result = await cruise(paths, { ...options, validate: true, ruleSet: { forbidden } });
  // Assess (by the caller)
  const output = result.output as ICruiseResult;
  return output.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`);
}

describe('import rules', () => {
  test('functions/, infra/ and bin/ follow them', async () => {
    expect(await violations(['functions', 'infra', 'bin'])).toEqual([]);
  }, 60_000);

  test('an upward import and a cycle behind a dynamic import are refused', async () => {
    const found = await violations(['test/fixtures/boundaries']);
    expect(found).toContainEqual(expect.stringMatching(/^layer-core: .*functions\/core\/upward\.ts -> .*functions\/volumes\/model\.ts$/));
    expect(found).toContainEqual(expect.stringMatching(/^layer-attachments: .*attachments\/service\.ts -> .*servers\/repo\.ts$/));
    expect(found).toContainEqual(expect.stringMatching(/^no-cycle: /));
  }, 60_000);
});

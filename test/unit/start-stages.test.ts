/**
 * The start's stage lines (infra/local/start-stages.ts) and what makes the state machines' stage
 * short after the first start: a definition asl-validator passed once is not validated again
 * (infra/local/asl-validation-cache.ts), while a broken one fails every time.
 */
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { aslValidationCache } from '../../infra/local/asl-validation-cache.js';
import { NO_STAGES, startStages } from '../../infra/local/start-stages.js';
import { loadMachine } from '../../infra/local/stepfunctions-machines.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function tempRoot(): string {
  const d = mkdtempSync(join(tmpdir(), 'ferry-stages-'));
  dirs.push(d);
  return d;
}

describe('stage lines', () => {
  test('one line per stage as it ends: its name, its time, when it ended, and what it did; a failed stage says so and its error goes on', async () => {
    const lines: string[] = [];
    const stages = startStages((l) => lines.push(l));

    const value = await stages.run('tables', async () => ['a', 'b'], (created) => `${created.length} created`);
    const failure = await stages.run('inventory', () => Promise.reject(new Error('refused'))).catch((e: unknown) => e);

    expect(value).toEqual(['a', 'b']);
    expect((failure as Error).message).toBe('refused');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^ferry: tables +\d+ ms +\(at \d+\.\d\d s\) 2 created$/);
    expect(lines[1]).toMatch(/^ferry: inventory +\d+ ms +\(at \d+\.\d\d s\) failed$/);
  });

  test('NO_STAGES runs the work and prints nothing', async () => {
    expect(await NO_STAGES.run('lock', () => 7)).toBe(7);
  });
});

describe('the validation record', () => {
  const pass = { StartAt: 'A', States: { A: { Type: 'Pass', End: true } } };
  const broken = { StartAt: 'A', States: { A: { Type: 'Pass', Next: 'Nowhere' } } };
  const wiring = { name: 'fixture', file: 'statemachines/fixture.asl.json' } as Parameters<typeof loadMachine>[0];
  const load = (definition: object, root: string) => {
    const validated = aslValidationCache(root);
    const machine = loadMachine(wiring, 'arn:aws:states:us-east-1:000000000000:stateMachine:fixture', JSON.stringify(definition), { functions: [], integrationResources: [], validated });
    validated.save();
    return machine;
  };

  test('a definition that passed is recorded, and a later load (another process: a new record) skips its validation', () => {
    const root = tempRoot();
    expect(aslValidationCache(root).passed(JSON.stringify(pass))).toBe(false);

    load(pass, root);

    const later = aslValidationCache(root);
    expect(later.passed(JSON.stringify(pass))).toBe(true);
    expect(later.passed(JSON.stringify({ ...pass, Comment: 'changed' }))).toBe(false);
    expect(() => load(pass, root)).not.toThrow();
  });

  test('a broken definition fails every load and is never recorded', () => {
    const root = tempRoot();
    expect(() => load(broken, root)).toThrow(/invalid/i);
    expect(() => load(broken, root)).toThrow(/invalid/i);
    expect(aslValidationCache(root).passed(JSON.stringify(broken))).toBe(false);
  });

  test('a damaged record only costs validations, and is written anew', () => {
    const root = tempRoot();
    const file = join(root, 'node_modules', '.cache', 'ferry', 'asl-validated.json');
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, '{"half');

    load(pass, root);

    expect(JSON.parse(readFileSync(file, 'utf8'))).toHaveLength(1);
  });
});

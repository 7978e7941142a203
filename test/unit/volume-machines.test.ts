import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';

type State = { Type: string; Retry?: { ErrorEquals: string[]; MaxAttempts?: number }[]; Catch?: { ErrorEquals: string[]; Next: string }[]; ResultPath?: string | null; Parameters?: Record<string, unknown> };
const load = (name: string) => JSON.parse(readFileSync(`statemachines/${name}.asl.json`, 'utf8')) as { StartAt: string; States: Record<string, State> };

describe.each([
  ['volume-create', ['Schedule', 'CreateOnBackend', 'MarkAvailable'], 'Rollback'],
  ['volume-delete', ['DeleteOnBackend', 'FinishDelete'], 'MarkErrorDeleting'],
])('%s', (name, guarded, rollback) => {
  const machine = load(name);
  test('every Task retries transient errors a bounded number of times', () => {
    for (const [stateName, s] of Object.entries(machine.States)) {
      if (s.Type !== 'Task') continue;
      expect(s.Retry?.[0]?.MaxAttempts, stateName).toBeGreaterThan(0);
      expect(s.Retry?.[0]?.ErrorEquals, stateName).not.toContain('States.ALL');
    }
  });
  test(`every step after the first catches States.ALL into ${rollback}`, () => {
    for (const stateName of guarded) {
      expect(machine.States[stateName]!.Catch, stateName).toEqual([expect.objectContaining({ ErrorEquals: ['States.ALL'], Next: rollback })]);
    }
  });
  test('no ResultPath "$" (the local interpreter writes it to a key named "$")', () => {
    for (const [stateName, s] of Object.entries(machine.States)) expect(s.ResultPath, stateName).not.toBe('$');
  });
  test('each Task names its step', () => {
    for (const s of Object.values(machine.States)) if (s.Type === 'Task') expect(typeof s.Parameters?.step).toBe('string');
  });
});

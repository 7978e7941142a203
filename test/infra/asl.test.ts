/**
 * The ASL files are deployed by CDK as S3 assets (template assertions cannot see them), and the
 * same files run on the local interpreter (aws-local-stepfunctions), which silently misbehaves on
 * some features. So the files themselves are checked here: valid ASL, only the subset the local
 * interpreter runs, and placeholders that match the wiring table.
 *
 * Every *.asl.json in statemachines/ is checked, so a new file is covered without touching this test.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { describe, expect, test } from 'vitest';
import { FUNCTIONS, STATE_MACHINES, substitutionKey } from '../../functions/wiring.js';
import { STATE_MACHINE_NAMES } from '../../functions/core/machines.js';
import { unsupportedFeatures as unsupportedIn } from '../../infra/local/asl-subset.js';

const unsupportedFeatures = (text: string) => unsupportedIn(JSON.parse(text));

const ROOT = resolve(import.meta.dirname, '../..');
const ASL_DIR = 'statemachines';

type AslValidator = (definition: unknown, options?: { checkPaths?: boolean; checkArn?: boolean }) => {
  isValid: boolean;
  errorsText: (separator?: string) => string;
};
// asl-validator is CommonJS without type declarations.
const aslValidator = createRequire(import.meta.url)('asl-validator') as AslValidator;

const aslFiles = existsSync(join(ROOT, ASL_DIR))
  ? readdirSync(join(ROOT, ASL_DIR))
      .filter((f) => f.endsWith('.asl.json'))
      .map((f) => `${ASL_DIR}/${f}`)
      .sort()
  : [];

/**
 * CDK replaces each `${FnX}` with a Lambda ARN at deploy; do the same with a fake ARN so the
 * validator checks the Resource as AWS will see it.
 */
function substitutePlaceholders(text: string): string {
  return text.replace(/\$\{([^}]*)\}/g, (_m, key: string) => `arn:aws:lambda:us-east-1:123456789012:function:ferry-${key}`);
}

/** asl-validator's verdict on the definition as deployed (placeholders replaced). */
function validateAsl(text: string): string[] {
  const result = aslValidator(JSON.parse(substitutePlaceholders(text)), { checkPaths: true, checkArn: true });
  return result.isValid ? [] : [result.errorsText('\n')];
}

/** `${...}` placeholders in the file that are not the substitution key of a function the machine lists. */
function unknownPlaceholders(text: string, machineFunctions: readonly string[]): string[] {
  const allowed = new Set(machineFunctions.map(substitutionKey));
  const found = [...text.matchAll(/\$\{([^}]*)\}/g)].map((m) => m[1]!);
  return [...new Set(found.filter((key) => !allowed.has(key)))].map(
    (key) => `\${${key}} is not one of ${[...allowed].map((k) => `\${${k}}`).join(', ') || '(none)'}: list the function for this machine in functions/wiring.ts`,
  );
}

/** Machines whose ASL file is missing. */
function machinesWithoutFile(machines: readonly { name: string; file: string }[], exists: (file: string) => boolean): string[] {
  return machines.filter((m) => !exists(m.file)).map((m) => `${m.name}: ${m.file} does not exist`);
}

/** ASL files no machine in the wiring table points at. */
function filesWithoutMachine(files: readonly string[], machines: readonly { file: string }[]): string[] {
  const wired = new Set(machines.map((m) => m.file));
  return files.filter((f) => !wired.has(f));
}

const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const machineOf = (file: string) => STATE_MACHINES.find((m) => m.file === file);

// (vitest fails an empty suite, so the suite exists only when there are files; the wiring checks below still run.)
describe.runIf(aslFiles.length > 0)('every ASL file in statemachines/', () => {
  for (const file of aslFiles) {
    test(`${file} is valid ASL (asl-validator)`, () => {
      expect(validateAsl(read(file))).toEqual([]);
    });
    test(`${file} uses only what the local interpreter supports`, () => {
      expect(unsupportedFeatures(read(file))).toEqual([]);
    });
    test(`${file} names only functions its machine lists in the wiring table`, () => {
      const machine = machineOf(file);
      expect(machine, `${file} is not in STATE_MACHINES`).toBeDefined();
      expect(unknownPlaceholders(read(file), machine!.functions)).toEqual([]);
    });
  }
});

describe('the wiring table and statemachines/ agree', () => {
  test('every machine in STATE_MACHINES has its ASL file', () => {
    expect(machinesWithoutFile(STATE_MACHINES, (f) => existsSync(join(ROOT, f)))).toEqual([]);
  });

  test('every ASL file in statemachines/ is a machine in STATE_MACHINES', () => {
    expect(filesWithoutMachine(aslFiles, STATE_MACHINES)).toEqual([]);
  });

  test('every name core/machines.ts knows has its machine in STATE_MACHINES (the compiler checks the other way)', () => {
    expect(STATE_MACHINE_NAMES.filter((n) => !STATE_MACHINES.some((m) => m.name === n))).toEqual([]);
  });

  test('every machine lists only functions that exist in FUNCTIONS', () => {
    const names = new Set(FUNCTIONS.map((f) => f.name));
    expect(STATE_MACHINES.flatMap((m) => m.functions.filter((f) => !names.has(f)).map((f) => `${m.name}: ${f}`))).toEqual([]);
  });
});

// The checks above pass on good files; these show each one fails on a bad definition.
describe('the checks reject bad definitions', () => {
  const task = (extra: Record<string, unknown> = {}) => ({ Type: 'Task', Resource: '${FnVolumeSteps}', End: true, ...extra });
  const machine = (states: Record<string, unknown>, top: Record<string, unknown> = {}) =>
    JSON.stringify({ StartAt: Object.keys(states)[0], States: states, ...top });
  const inlineMap = (extra: Record<string, unknown> = {}, processorConfig?: Record<string, unknown>) => ({
    Type: 'Map',
    ItemsPath: '$.items',
    ItemProcessor: { ...(processorConfig ? { ProcessorConfig: processorConfig } : {}), StartAt: 'Each', States: { Each: task() } },
    End: true,
    ...extra,
  });

  test('a well-formed definition in the supported subset passes every check', () => {
    const good = machine({ Step: task({ Next: 'Fan', End: undefined }), Fan: inlineMap({}, { Mode: 'INLINE' }) });
    expect(validateAsl(good)).toEqual([]);
    expect(unsupportedFeatures(good)).toEqual([]);
    expect(unknownPlaceholders(good, ['volume-steps'])).toEqual([]);
  });

  test('asl-validator rejects a transition to a missing state', () => {
    expect(validateAsl(machine({ A: { Type: 'Pass', Next: 'Nowhere' } })).join()).toMatch(/Nowhere/);
  });

  test('asl-validator rejects an unknown state type', () => {
    expect(validateAsl(machine({ A: { Type: 'Teleport', End: true } }))).not.toEqual([]);
  });

  test('.waitForTaskToken is rejected', () => {
    const bad = machine({ A: task({ Resource: 'arn:aws:states:::lambda:invoke.waitForTaskToken' }) });
    expect(unsupportedFeatures(bad).join()).toMatch(/A: \.waitForTaskToken/);
  });

  test('QueryLanguage JSONata is rejected at the top level', () => {
    expect(unsupportedFeatures(machine({ A: task() }, { QueryLanguage: 'JSONata' })).join()).toMatch(/JSONata/);
  });

  test('QueryLanguage JSONata is rejected on a nested state', () => {
    const bad = machine({ M: inlineMap({}, undefined) });
    const parsed = JSON.parse(bad);
    parsed.States.M.ItemProcessor.States.Each.QueryLanguage = 'JSONata';
    expect(unsupportedFeatures(JSON.stringify(parsed)).join()).toMatch(/Each\.QueryLanguage: JSONata/);
  });

  test.each(['Assign', 'Arguments', 'Output'])('%s on a state is rejected', (field) => {
    expect(unsupportedFeatures(machine({ A: task({ [field]: { x: 1 } }) })).join()).toMatch(new RegExp(`A: ${field}`));
  });

  test('"ResultPath": "$" is rejected (the interpreter writes a key named "$")', () => {
    expect(unsupportedFeatures(machine({ A: task({ ResultPath: '$' }) })).join()).toMatch(/A: "ResultPath": "\$"/);
    expect(unsupportedFeatures(machine({ A: task({ ResultPath: '$.out' }) }))).toEqual([]);
  });

  test('Assign inside a Parallel branch is rejected', () => {
    const bad = machine({ P: { Type: 'Parallel', End: true, Branches: [{ StartAt: 'B', States: { B: { Type: 'Pass', Assign: { x: 1 }, End: true } } }] } });
    expect(unsupportedFeatures(bad).join()).toMatch(/P\/B: Assign/);
  });

  test.each(['ToleratedFailurePercentage', 'ToleratedFailureCount', 'ItemReader', 'ResultWriter'])('Map %s is rejected', (field) => {
    expect(unsupportedFeatures(machine({ M: inlineMap({ [field]: field.startsWith('Tolerated') ? 5 : { Resource: 'arn:aws:states:::s3:getObject' } }) })).join()).toMatch(new RegExp(`M: Map ${field}`));
  });

  test('Distributed Map is rejected', () => {
    expect(unsupportedFeatures(machine({ M: inlineMap({}, { Mode: 'DISTRIBUTED', ExecutionType: 'STANDARD' }) })).join()).toMatch(/Distributed Map/);
  });

  test('a placeholder for a function the machine does not list is rejected', () => {
    const bad = machine({ A: task({ Resource: '${FnVolumeApi}' }) });
    expect(unknownPlaceholders(bad, ['volume-steps'])).toEqual([expect.stringContaining('${FnVolumeApi}')]);
  });

  test('a machine whose file is missing is reported', () => {
    expect(machinesWithoutFile([{ name: 'ghost', file: 'statemachines/ghost.asl.json' }], () => false)).toEqual(['ghost: statemachines/ghost.asl.json does not exist']);
  });

  test('an ASL file no machine points at is reported', () => {
    expect(filesWithoutMachine(['statemachines/a.asl.json', 'statemachines/stray.asl.json'], [{ file: 'statemachines/a.asl.json' }])).toEqual(['statemachines/stray.asl.json']);
  });

  test('a misspelt placeholder is rejected', () => {
    expect(unknownPlaceholders(machine({ A: task({ Resource: '${FnVolumeStep}' }) }), ['volume-steps'])).toHaveLength(1);
  });
});

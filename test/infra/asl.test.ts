/**
 * The ASL files are deployed by CDK as S3 assets (template assertions cannot see them), and the
 * same files run on the local interpreter (aws-local-stepfunctions), which silently misbehaves on
 * some features. So the files themselves are checked here: valid ASL, only the subset the local
 * interpreter runs, placeholders that match the wiring table, and the one retry, catch and timeout
 * policy (infra/asl/policy.ts; `npm run asl:policy` writes it into the files).
 *
 * Every *.asl.json in statemachines/ is checked, so a new file is covered without touching this test.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { describe, expect, test } from 'vitest';
import { FUNCTIONS, STATE_MACHINES, substitutionKey } from '../../functions/wiring.js';
import { STATE_MACHINE_NAMES } from '../../functions/core/machines.js';
import { MAX_LOCAL_TIMEOUT_SECONDS, unsupportedFeatures as unsupportedIn } from '../../infra/asl/subset.js';
import { applyPolicy, policyDrift, worstCaseSeconds } from '../../infra/asl/check.js';
import { MACHINE_BOUNDS_FILE, machineBoundsSource } from '../../infra/asl/machine-bounds.js';
import { MACHINE_WORST_CASE_SECONDS } from '../../functions/core/machine-bounds.js';
import {
  COPY_TASK_RESOURCE,
  COPY_TASK_TIMEOUT_SECONDS,
  MACHINE_POLICIES,
  BACKEND_WAIT,
  RETRIERS,
  type MachinePolicy,
} from '../../infra/asl/policy.js';

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
    test(`${file} follows the retry, catch and timeout policy (infra/asl/policy.ts)`, () => {
      const machine = machineOf(file);
      expect(machine, `${file} is not in STATE_MACHINES`).toBeDefined();
      expect(policyDrift(JSON.parse(read(file)), MACHINE_POLICIES[machine!.name])).toEqual([]);
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

describe('the policy agrees with what it sizes', () => {
  test('every timeout fits what the local interpreter can count and what AWS allows (one year)', () => {
    const timeouts = [COPY_TASK_TIMEOUT_SECONDS, ...Object.values(MACHINE_POLICIES).map((p) => p.timeoutSeconds)];
    expect(timeouts.filter((t) => t > MAX_LOCAL_TIMEOUT_SECONDS || t > 365 * 24 * 3600)).toEqual([]);
  });

  test('functions/core/machine-bounds.ts is each machine\'s worst case as the ASL files and the policy make it (npm run asl:policy writes it)', () => {
    expect(read(MACHINE_BOUNDS_FILE)).toBe(machineBoundsSource(ROOT));
    // The audit's stuck-attach-wait age: 90 looks at 10 s, each at its 130 s budget, then Failed: 3.8 hours.
    expect(MACHINE_WORST_CASE_SECONDS['volume-attach-wait']).toBe(worstCaseSeconds(JSON.parse(read('statemachines/volume-attach-wait.asl.json')), MACHINE_POLICIES['volume-attach-wait']).seconds);
    expect(MACHINE_WORST_CASE_SECONDS['volume-attach-wait'] / 3600).toBeCloseTo(3.8, 1);
  });

  test('a failover of 10,000 volumes and a migration with three five-day copies fit their machines', () => {
    const failover = JSON.parse(read('statemachines/volume-failover.asl.json'));
    expect(worstCaseSeconds(failover, MACHINE_POLICIES['volume-failover']).seconds).toBeGreaterThan(9 * 3600);
    const start = JSON.parse(read('statemachines/share-migration-start.asl.json'));
    expect(worstCaseSeconds(start, MACHINE_POLICIES['share-migration-start']).seconds).toBeGreaterThan(3 * COPY_TASK_TIMEOUT_SECONDS);
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

  test('HeartbeatSeconds and a timeout no local timer can count are rejected', () => {
    expect(unsupportedFeatures(machine({ A: task({ HeartbeatSeconds: 60 }) })).join()).toMatch(/A: HeartbeatSeconds/);
    expect(unsupportedFeatures(machine({ A: task({ TimeoutSeconds: MAX_LOCAL_TIMEOUT_SECONDS + 1 }) })).join()).toMatch(/A: TimeoutSeconds/);
    expect(unsupportedFeatures(machine({ A: task() }, { TimeoutSeconds: MAX_LOCAL_TIMEOUT_SECONDS + 1 })).join()).toMatch(/TimeoutSeconds .* of the machine/);
    expect(unsupportedFeatures(machine({ A: task({ TimeoutSeconds: MAX_LOCAL_TIMEOUT_SECONDS }) }, { TimeoutSeconds: MAX_LOCAL_TIMEOUT_SECONDS }))).toEqual([]);
  });
});

describe('the policy check rejects drift', () => {
  const policy: MachinePolicy = { timeoutSeconds: 3600, retrier: 'transientOrDriver', tasks: { Undo: 'cleanup' } };
  const catchTo = (next: string, resultPath = '$.error') => [{ ErrorEquals: ['States.ALL'], ResultPath: resultPath, Next: next }];
  type State = Record<string, unknown>;
  const step = (extra: State = {}): State => ({ Type: 'Task', Resource: '${FnVolumeSteps}', TimeoutSeconds: 130, Retry: [RETRIERS.transientOrDriver], ...extra });
  /** A machine that follows `policy`: Step, caught by Undo (cleanup), whose failure goes to Gone. */
  const good = (): { TimeoutSeconds?: number; StartAt: string; States: Record<string, State> } => ({
    TimeoutSeconds: 3600,
    StartAt: 'Step',
    States: {
      Step: step({ Catch: catchTo('Undo'), End: true }),
      Undo: step({ TimeoutSeconds: 60, Retry: [RETRIERS.cleanup], Catch: catchTo('Gone', '$.rollbackError'), Next: 'Gone' }),
      Gone: { Type: 'Fail', Error: 'X' },
    },
  });
  const drift = (definition: unknown, p: MachinePolicy = policy) => policyDrift(definition as never, p).join('\n');

  test('a machine that follows the policy passes', () => {
    expect(policyDrift(good() as never, policy)).toEqual([]);
  });

  test('a Task without the Retry is rejected', () => {
    const bad = good();
    delete bad.States.Step!.Retry;
    expect(drift(bad)).toMatch(/Step: Retry is null/);
  });

  test('a Retry with another interval, or another retrier than the policy names, is rejected', () => {
    const bad = good();
    bad.States.Step!.Retry = [{ ...RETRIERS.transientOrDriver, IntervalSeconds: 2 }];
    expect(drift(bad)).toMatch(/Step: Retry is .*"IntervalSeconds":2/);
    const other = good();
    other.States.Undo!.Retry = [RETRIERS.transientOrDriver];
    expect(drift(other)).toMatch(/Undo: Retry .* cleanup retrier/);
  });

  test('a Task the policy says waits for its backend needs the BackendNotReady retrier first', () => {
    const waiting: MachinePolicy = { ...policy, waits: ['Step'] };
    expect(drift(good(), waiting)).toMatch(/Step: Retry is .*BackendNotReady wait and transientOrDriver retrier/);
    const fixed = good();
    fixed.States.Step!.Retry = [BACKEND_WAIT, RETRIERS.transientOrDriver];
    // (Its worst case grows with the wait: the machine's timeout check sees that separately.)
    expect(policyDrift(fixed as never, waiting).filter((line) => line.includes('Retry'))).toEqual([]);
    // And only there: the wait on a Task the policy does not list is drift too.
    expect(drift(fixed)).toMatch(/Step: Retry is .*BackendNotReady/);
  });

  test('a machine without TimeoutSeconds, or with another one than the policy, is rejected', () => {
    const bad = good();
    delete bad.TimeoutSeconds;
    expect(drift(bad)).toMatch(/the machine's TimeoutSeconds is undefined/);
    expect(drift({ ...good(), TimeoutSeconds: 7200 })).toMatch(/TimeoutSeconds is 7200, the policy's is 3600/);
  });

  test('a machine timeout below the worst case of its Tasks is rejected', () => {
    // Step: 130 s on each of 4 attempts + 1+2+4 s; Undo: 60 s on each of 5 attempts + 2+4+8+16 s.
    expect(worstCaseSeconds(good() as never, policy).seconds).toBe(130 * 4 + 7 + 60 * 5 + 30);
    expect(drift({ ...good(), TimeoutSeconds: 600 }, { ...policy, timeoutSeconds: 600 })).toMatch(/below its worst case, 857 s/);
  });

  test('a Lambda Task without TimeoutSeconds, or longer than its function can run, is rejected', () => {
    const bad = good();
    delete bad.States.Step!.TimeoutSeconds;
    expect(drift(bad)).toMatch(/Step: TimeoutSeconds is null/);
    // volume-steps runs for at most 120 s.
    expect(drift({ ...good(), States: { ...good().States, Step: step({ TimeoutSeconds: 131, Catch: catchTo('Undo'), End: true }) } })).toMatch(/Step: TimeoutSeconds is 131; .* from 1 to 130/);
  });

  test('a Catch of another error or with another ResultPath is rejected', () => {
    const bad = good();
    bad.States.Step!.Catch = [{ ErrorEquals: ['DriverError'], ResultPath: '$.error', Next: 'Undo' }];
    expect(drift(bad)).toMatch(/Step: Catch must be one catcher/);
    const elsewhere = good();
    elsewhere.States.Step!.Catch = catchTo('Undo', '$.oops');
    expect(drift(elsewhere)).toMatch(/Step: Catch must be one catcher/);
  });

  test('the copy task without its Retry and timeout is rejected, and HeartbeatSeconds too', () => {
    const copy = (extra: Record<string, unknown>) => ({ ...good(), States: { ...good().States, Step: { Type: 'Task', Resource: COPY_TASK_RESOURCE, Catch: catchTo('Undo'), End: true, ...extra } } });
    const problems = drift(copy({}));
    expect(problems).toMatch(/Step: Retry is null, the policy's copyTaskLaunch retrier/);
    expect(problems).toMatch(/Step: TimeoutSeconds of the copy task is undefined/);
    expect(drift(copy({ TimeoutSeconds: COPY_TASK_TIMEOUT_SECONDS, Retry: [RETRIERS.copyTaskLaunch], HeartbeatSeconds: 600 }), { ...policy, timeoutSeconds: 30 * 24 * 3600 })).toMatch(
      /Step: HeartbeatSeconds is not in the policy/,
    );
  });

  test('a policy naming a Task the machine does not have, a Retry on a Map and an unsized Map are rejected', () => {
    expect(drift(good(), { ...policy, tasks: { Undo: 'cleanup', Gone2: 'cleanup' } })).toMatch(/names Task Gone2/);
    const map = { ...good(), States: { ...good().States, Step: { ...inlineMapOf(step({ End: true })), Retry: [RETRIERS.transient], Catch: catchTo('Undo'), Next: 'Gone' } } };
    const problems = drift(map);
    expect(problems).toMatch(/Step: a Map state has a Retry/);
    expect(problems).toMatch(/Step: a Map needs sizing.mapItems/);
  });

  test('a loop counts as often as the policy sizes it, a Map by rounds of MaxConcurrency', () => {
    const loop = { StartAt: 'Poll', States: { Poll: step({ Next: 'Again' }), Again: { Type: 'Choice', Choices: [{ Variable: '$.x', BooleanEquals: true, Next: 'Poll' }], Default: 'Done' }, Done: { Type: 'Succeed' } } };
    expect(worstCaseSeconds(loop as never, { sizing: { runs: { Poll: 10 } } }).seconds).toBe(10 * (130 * 4 + 7));
    const map = { StartAt: 'M', States: { M: { ...inlineMapOf(step({ End: true })), MaxConcurrency: 4, End: true } } };
    expect(worstCaseSeconds(map as never, { sizing: { mapItems: { M: 10 } } }).seconds).toBe(3 * (130 * 4 + 7));
  });

  test('npm run asl:policy (applyPolicy) writes the Retry and the timeouts, after which nothing drifts', () => {
    const bad = good();
    delete bad.TimeoutSeconds;
    delete bad.States.Step!.Retry;
    bad.States.Undo!.Retry = [{ ...RETRIERS.cleanup, MaxAttempts: 9 }];
    expect(policyDrift(bad as never, policy)).toHaveLength(3);
    const fixed = applyPolicy(bad as never, policy);
    expect(policyDrift(fixed, policy)).toEqual([]);
    expect(Object.keys(fixed)).toEqual(['StartAt', 'TimeoutSeconds', 'States']);
    expect(Object.keys((fixed.States as Record<string, object>).Step)).toEqual(['Type', 'Resource', 'TimeoutSeconds', 'Retry', 'Catch', 'End']);
  });
});

function inlineMapOf(inner: Record<string, unknown>) {
  return { Type: 'Map', ItemsPath: '$.items', ItemProcessor: { ProcessorConfig: { Mode: 'INLINE' }, StartAt: 'Each', States: { Each: inner } } };
}

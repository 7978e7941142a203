import { afterEach, describe, expect, it, vi } from 'vitest';
import { eventually } from '../support/poll.js';
import { DriverError } from '../../functions/core/errors.js';
import {
  FAULTS_ENV,
  clearFault,
  clearFaultCalls,
  clearFaults,
  crashedCalls,
  faultCalls,
  faultPoint,
  faultsForEnv,
  injectFault,
  listFaults,
  onCrash,
  tracePoints,
  withFaults,
} from '../../functions/core/faults.js';

/** A tiny real backend: a set of names, with a count of how often each method really ran. */
class MemoryBackend {
  readonly names = new Set<string>();
  readonly ran: string[] = [];
  readonly label = 'memory';
  async create(name: string): Promise<string> {
    this.ran.push('create');
    this.names.add(name);
    return name;
  }
  async remove(name: string): Promise<void> {
    this.ran.push('remove');
    if (!this.names.delete(name)) throw new Error(`no ${name}`);
  }
  /** Calls its own method: such inner calls are not intercepted. */
  async recreate(name: string): Promise<string> {
    this.ran.push('recreate');
    await this.remove(name).catch(() => undefined);
    return this.create(name);
  }
  count(): number {
    return this.names.size;
  }
}

afterEach(() => {
  clearFaults();
  clearFaultCalls();
  tracePoints(false);
  vi.unstubAllEnvs();
});

describe('withFaults', () => {
  it('passes calls through when no fault matches', async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'share', method: 'create', mode: 'fail' });
    injectFault({ kind: 'volume', backend: 'ferry@b', method: 'create', mode: 'fail' });

    // Act
    const name = await wrapped.create('v1');

    // Assess
    expect(name).toBe('v1');
    expect(wrapped.count()).toBe(1);
    expect(wrapped.label).toBe('memory');
    expect(faultCalls().map(({ kind, backend, method, outcome }) => ({ kind, backend, method, outcome }))).toEqual([
      { kind: 'volume', backend: 'ferry@a', method: 'create', outcome: 'ok' },
      { kind: 'volume', backend: 'ferry@a', method: 'count', outcome: 'ok' },
    ]);
  });

  it("'fail' throws a DriverError without calling the real method", async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'volume', backend: 'ferry@a', method: 'create', mode: 'fail' });

    // Act
    const error = await wrapped.create('v1').catch((e: unknown) => e);

    // Assess
    expect(error).toBeInstanceOf(DriverError);
    expect((error as Error).message).toBe('injected fault: volume.create on ferry@a');
    expect(backend.ran).toEqual([]);
    expect(faultCalls()[0]).toMatchObject({ method: 'create', outcome: 'injected-fail', mode: 'fail' });
  });

  it("'fail-after' lets the real call happen, then throws (the lost reply)", async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'volume', method: 'create', mode: 'fail-after', message: 'reply lost' });

    // Act
    const error = await wrapped.create('v1').catch((e: unknown) => e);

    // Assess
    expect((error as Error).message).toBe('reply lost');
    expect(backend.names.has('v1')).toBe(true);
    expect(faultCalls()[0].outcome).toBe('injected-fail-after');
  });

  it("'fail-after' passes on the real method's own error", async () => {
    // Prepare
    const wrapped = withFaults('volume', 'ferry@a', new MemoryBackend());
    injectFault({ kind: 'volume', method: 'remove', mode: 'fail-after' });

    // Act / Assess
    await expect(wrapped.remove('missing')).rejects.toThrow('no missing');
    expect(faultCalls()[0].outcome).toBe('error');
  });

  it("'hang' holds the call until the fault is cleared, then runs it", async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    const id = injectFault({ kind: 'volume', method: 'create', mode: 'hang' });

    // Act
    const pending = wrapped.create('v1');
    await eventually((note) => note(faultCalls()[0])?.hanging === true || undefined, 'the first call to hang');
    const ranWhileHeld = [...backend.ran];
    clearFault(id);
    const name = await pending;

    // Assess
    expect(ranWhileHeld).toEqual([]);
    expect(name).toBe('v1');
    expect(backend.names.has('v1')).toBe(true);
    expect(faultCalls()[0]).toMatchObject({ outcome: 'ok', hanging: false, mode: 'hang' });
    expect(listFaults()).toEqual([]);
  });

  it("a 'hang' with times=1 holds only the first call, which clearFault still releases", async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    const id = injectFault({ kind: 'volume', method: 'create', mode: 'hang', times: 1 });

    // Act
    const held = wrapped.create('v1');
    const second = await wrapped.create('v2');
    const stillHeld = backend.names.has('v1');
    clearFault(id);
    await held;

    // Assess
    expect(second).toBe('v2');
    expect(stillHeld).toBe(false);
    expect(backend.names.has('v1')).toBe(true);
  });

  it('clearFaults releases every hung call', async () => {
    // Prepare
    const wrapped = withFaults('volume', 'ferry@a', new MemoryBackend());
    injectFault({ kind: 'volume', method: '*', mode: 'hang' });
    const calls = [wrapped.create('v1'), wrapped.create('v2')];

    // Act
    await eventually((note) => note(faultCalls().filter((c) => c.hanging)).length === 2 || undefined, 'both calls to hang');
    clearFaults();

    // Assess
    await expect(Promise.all(calls)).resolves.toEqual(['v1', 'v2']);
  });

  it('times counts down and removes the fault at 0', async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'volume', method: 'create', mode: 'fail', times: 2 });

    // Act
    const outcomes = [];
    for (const n of ['a', 'b', 'c']) outcomes.push(await wrapped.create(n).then(() => 'ok', () => 'failed'));

    // Assess
    expect(outcomes).toEqual(['failed', 'failed', 'ok']);
    expect(listFaults()).toEqual([]);
    expect([...backend.names]).toEqual(['c']);
  });

  it('applies the first matching fault, and method * matches every method', async () => {
    // Prepare
    const wrapped = withFaults('volume', 'ferry@a', new MemoryBackend());
    injectFault({ kind: 'volume', method: '*', mode: 'fail', message: 'backend down', times: 1 });
    injectFault({ kind: 'volume', method: 'create', mode: 'fail', message: 'create broken', times: 1 });

    // Act
    const first = await wrapped.create('a').catch((e: Error) => e.message);
    const second = await wrapped.create('a').catch((e: Error) => e.message);

    // Assess
    expect([first, second]).toEqual(['backend down', 'create broken']);
  });

  it("does not intercept a driver's calls to its own methods", async () => {
    // Prepare
    const wrapped = withFaults('volume', 'ferry@a', new MemoryBackend());
    injectFault({ kind: 'volume', method: 'create', mode: 'fail' });

    // Act
    const name = await wrapped.recreate('v1');

    // Assess
    expect(name).toBe('v1');
    expect(faultCalls().map((c) => c.method)).toEqual(['recreate']);
  });

  it('logs calls in order with increasing sequence numbers', async () => {
    // Prepare
    const wrapped = withFaults('volume', 'ferry@a', new MemoryBackend());
    injectFault({ kind: 'volume', method: 'remove', mode: 'fail', times: 1 });

    // Act
    await wrapped.create('v1');
    await wrapped.remove('v1').catch(() => undefined);
    await wrapped.remove('v1');

    // Assess
    const log = faultCalls();
    expect(log.map((c) => `${c.method}:${c.outcome}`)).toEqual(['create:ok', 'remove:injected-fail', 'remove:ok']);
    expect(log[1].seq).toBeGreaterThan(log[0].seq);
    expect(log[2].seq).toBeGreaterThan(log[1].seq);
    expect(typeof log[0].time).toBe('number');
  });

  it('rejects a malformed fault', () => {
    // Act / Assess
    expect(() => injectFault({ kind: 'volume', method: 'create', mode: 'explode' as 'fail' })).toThrow();
    expect(() => injectFault({ kind: 'volume', method: 'create', mode: 'fail', times: 0 })).toThrow();
  });
});

describe('FERRY_FAULTS', () => {
  it('preloads faults when the module loads (as in a child process)', async () => {
    // Prepare
    vi.stubEnv(FAULTS_ENV, JSON.stringify([{ kind: 'share', backend: 'ferry@nfs', method: 'migrationStart', mode: 'fail', times: 1 }]));
    vi.resetModules();

    // Act
    const fresh = await import('../../functions/core/faults.js');
    const wrapped = fresh.withFaults('share', 'ferry@nfs', { migrationStart: async () => 'started' });
    const first = await wrapped.migrationStart().catch((e: Error) => e.message);
    const second = await wrapped.migrationStart();

    // Assess
    expect(first).toBe('injected fault: share.migrationStart on ferry@nfs');
    expect(second).toBe('started');
  });

  it('refuses a malformed value loudly', async () => {
    // Prepare
    vi.stubEnv(FAULTS_ENV, '[{"kind": "share"}]');
    vi.resetModules();

    // Act / Assess
    await expect(import('../../functions/core/faults.js')).rejects.toThrow(/^FERRY_FAULTS must be an array of .*: \[0\]: method: required; mode: must be one of fail, hang, /);
  });

  it('faultsForEnv hands the remaining faults to a child', async () => {
    // Prepare
    injectFault({ kind: 'volume', method: 'create', mode: 'fail', times: 3 });
    await withFaults('volume', 'ferry@a', new MemoryBackend()).create('x').catch(() => undefined);

    // Act
    const value = JSON.parse(faultsForEnv());

    // Assess
    expect(value).toEqual([{ kind: 'volume', method: 'create', mode: 'fail', times: 2 }]);
  });
});

/** True when the promise settled within a few turns of the event loop. */
async function settlesSoon(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  p.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((r) => setTimeout(r, 20));
  return settled;
}

describe('crash modes', () => {
  it("'crash' stops the caller for good before the real call, even after the fault is cleared", async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'volume', method: 'create', mode: 'crash', times: 1 });

    // Act
    const pending = wrapped.create('v1');
    clearFaults();

    // Assess
    expect(await settlesSoon(pending)).toBe(false);
    expect(backend.ran).toEqual([]);
    expect(crashedCalls()).toMatchObject([{ kind: 'volume', method: 'create', outcome: 'crashed', mode: 'crash' }]);
    // The fault was spent: the next call goes through.
    expect(await wrapped.create('v2')).toBe('v2');
  });

  it("'crash-after' makes the real call's effect, then never returns", async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'volume', method: 'create', mode: 'crash-after', times: 1 });

    // Act
    const pending = wrapped.create('v1');

    // Assess
    expect(await settlesSoon(pending)).toBe(false);
    expect(backend.names.has('v1')).toBe(true);
    expect(crashedCalls()).toHaveLength(1);
  });

  it('skip lets the first n matching calls through and aims at the next one', async () => {
    // Prepare
    const backend = new MemoryBackend();
    const wrapped = withFaults('volume', 'ferry@a', backend);
    injectFault({ kind: 'volume', method: 'create', mode: 'crash', times: 1, skip: 2 });

    // Act
    expect(await wrapped.create('a')).toBe('a');
    expect(await wrapped.remove('a')).toBeUndefined();
    expect(await wrapped.create('b')).toBe('b');
    const third = wrapped.create('c');

    // Assess
    expect(await settlesSoon(third)).toBe(false);
    expect([...backend.names]).toEqual(['b']);
    expect(await wrapped.create('d')).toBe('d');
  });

  it('a crash at a faultPoint stops its caller, and onCrash hears it in the caller\'s context', async () => {
    // Prepare
    const heard: string[] = [];
    const stop = onCrash((call) => heard.push(`${call.kind}:${call.backend}:${call.method}`));
    injectFault({ kind: 'step', backend: 'volume-create', method: 'Schedule', mode: 'crash', times: 1 });

    // Act
    const other = faultPoint('step', 'volume-create', 'Record');
    const crashed = faultPoint('step', 'volume-create', 'Schedule');
    stop();

    // Assess
    expect(await settlesSoon(other)).toBe(true);
    expect(await settlesSoon(crashed)).toBe(false);
    expect(heard).toEqual(['step:volume-create:Schedule']);
  });

  it('tracePoints logs every faultPoint passed while on, nothing while off', async () => {
    // Act
    await faultPoint('step', 'm', 'A');
    tracePoints(true);
    await faultPoint('step', 'm', 'B');
    await faultPoint('cinder', 'nova', 'attachment_create');
    tracePoints(false);
    await faultPoint('step', 'm', 'C');

    // Assess
    expect(faultCalls().map(({ kind, method, outcome }) => `${kind}.${method}:${outcome}`)).toEqual(['step.B:ok', 'cinder.attachment_create:ok']);
  });

  it('faultsForEnv hands skip on to a child', () => {
    // Prepare
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'crash', times: 1, skip: 3 });

    // Act / Assess
    expect(JSON.parse(faultsForEnv())).toEqual([{ kind: 'copy', method: 'copy_file', mode: 'crash', times: 1, skip: 3 }]);
  });
});

/**
 * The start's reconcile pass runs in the background once the stack answers (infra/local/stack.ts
 * reconcileInBackground, issue 16): a request served while it runs is answered and carried out as
 * at any other time; the pass's result is logged (its stage line and its log line) and recorded as
 * the last audit; a stop while it runs interrupts it between two repairs, cleanly: the stop throws
 * nothing, nothing is logged as an error, the pass records no audit.
 *
 * The real reconciler runs, held at its start by a gate the test opens (or the stop's signal), so
 * that "while the pass runs" is a state the test holds, not a race it hopes to win.
 */
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { getLastAudit, type LastAudit } from '../../functions/audit/last-audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { logger } from '../../functions/core/logger.js';
import type { Reconcile, ReconcileEvent } from '../../infra/local/reconcile-loop.js';
import { startStages } from '../../infra/local/start-stages.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';
import { volumeStatusBecomes } from '../support/volume-waits.js';

const DEMO = 'demo:demo';
let stack: TestLocalStack;
const stageLines: string[] = [];
/** Each pass the stack started, and how to let it go on. */
const passes: { before: Date; release: () => void }[] = [];

const heldReconciler: Reconcile = async ({ before, signal }) => {
  await new Promise<void>((resolve) => {
    passes.push({ before, release: resolve });
    signal?.addEventListener('abort', () => resolve(), { once: true });
  });
  return reconcile({ before, ...(signal ? { signal } : {}) });
};

const info = vi.spyOn(logger, 'info');
const error = vi.spyOn(logger, 'error');
const logged = (spy: typeof info, text: string) => spy.mock.calls.filter(([message]) => typeof message === 'string' && message.includes(text));

/** Whether `promise` has settled, looked at after the microtasks queued so far ran. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  void promise.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return done;
}

async function volumeApi(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${stack.url}/volume/v3${path}`, {
    method,
    headers: { 'X-Auth-Token': DEMO, 'OpenStack-API-Version': 'volume 3.0', Accept: 'application/json', ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

beforeAll(async () => {
  stack = await useLocalStack({ reconcileInBackground: true, reconciler: heldReconciler, stages: startStages((line) => stageLines.push(line)) });
});
afterAll(async () => {
  await stack?.stop();
  vi.restoreAllMocks();
});

describe("the start's reconcile pass, after the stack answers", () => {
  let recorded: LastAudit | undefined;

  test('a request served while it runs is carried out; then its result is logged and recorded, and no earlier', async () => {
    // Prepare: the stack answers, its pass has begun and is held.
    await eventually(async () => passes.length === 1 || undefined, "the start's pass to begin");
    expect(await settled(stack.reconciled)).toBe(false);

    // Act: a volume made and read back through the API (its create machine runs meanwhile).
    const created = await volumeApi('POST', '/demo/volumes', { volume: { name: 'during-reconcile', size: 1 } });
    expect(created.status).toBe(202);
    const id = created.body.volume.id as string;
    await volumeStatusBecomes(stack.url, DEMO, id, 'available');
    const shown = await volumeApi('GET', `/demo/volumes/${id}`);

    // Assess: the request's answer is right while the pass has not ended, nor logged, nor recorded.
    expect(shown.body.volume).toMatchObject({ id, name: 'during-reconcile', size: 1, status: 'available' });
    expect(await settled(stack.reconciled)).toBe(false);
    expect(stageLines.filter((l) => l.startsWith('ferry: reconcile'))).toEqual([]);
    expect(logged(info, 'reconcile (start)')).toEqual([]);
    expect(await getLastAudit()).toBeUndefined();

    // Act: the pass goes on.
    passes[0]!.release();
    const event: ReconcileEvent = await stack.reconciled;

    // Assess: a clean outcome (the volume made meanwhile is consistent), its stage line, its log line, the last audit.
    expect(event).toMatchObject({ trigger: 'start', outcome: { repaired: [], left: [], remaining: [] } });
    expect(stageLines.filter((l) => l.startsWith('ferry: reconcile'))).toEqual([
      expect.stringMatching(/^ferry: reconcile +\d+ ms {2}\(at \d+\.\d\d s\) 0 repaired, 0 left, 0 finding\(s\) for an operator$/),
    ]);
    expect(logged(info, 'reconcile (start): 0 repaired, 0 left, 0 finding(s) for an operator')).toHaveLength(1);
    recorded = await getLastAudit();
    expect(recorded).toMatchObject({ repaired: 0, left: 0, findingCount: 0 });
    expect(recorded!.checked.volumes).toBeGreaterThanOrEqual(1);
  });

  test('a stop while it runs interrupts it: the stop throws nothing, nothing is logged as an error, no audit is recorded', async () => {
    // Prepare: a restart whose pass is held.
    await stack.restart();
    await eventually(async () => passes.length === 2 || undefined, "the restart's pass to begin");
    const heldPass = stack.reconciled;
    const errorsBefore = error.mock.calls.length;

    // Act: stop, and start again (its own pass held: nothing it could record).
    await stack.restart();

    // Assess
    const event = await heldPass;
    expect(event).toMatchObject({ trigger: 'start', interrupted: { repairsMade: 0 } });
    expect('error' in event).toBe(false);
    expect(stageLines.filter((l) => l.startsWith('ferry: reconcile')).at(-1)).toMatch(/interrupted by the stop$/);
    expect(logged(info, 'reconcile (start) interrupted by the stop')).toHaveLength(1);
    expect(error.mock.calls.slice(errorsBefore)).toEqual([]);
    expect(passes).toHaveLength(3);
    expect(await getLastAudit()).toEqual(recorded);
  });
});

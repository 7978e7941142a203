/**
 * The crash harness (issue 11, "No orphan after any crash"): runs an operation once cleanly while
 * recording every point it passes — driver calls (kinds volume, share, compute), Nova's calls to
 * Cinder (kind cinder), the local runner's step boundaries (kinds step, step-before) — then, for
 * each point, on fresh fixtures: crashes the operation there (functions/core/faults.ts: `crash-after`
 * for a driver call, its effect made; `crash` at a named point), restarts the stack (RUNNING
 * executions resume from the start), and checks the three promises: the operation finished or
 * rolled back, `runAudit()` finds nothing (no repair), and no effect was made twice.
 *
 * A crashed caller is never released: its fault is spent (times 1) and its promise never settles,
 * as after a kill -9.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListExecutionsCommand } from '@aws-sdk/client-sfn';
import { runAudit, type AuditFinding } from '../../functions/audit/audit.js';
import { scanAllAttachments } from '../../functions/attachments/repo.js';
import { clearFaultCalls, clearFaults, crashedCalls, faultCalls, injectFault, tracePoints, type FaultCall } from '../../functions/core/faults.js';
import { sfn, stateMachineArn } from '../../functions/core/executions.js';
import { STATE_MACHINES } from '../../functions/wiring.js';
import { REPO_ROOT } from '../../infra/local/http.js';
import { settleExecutions } from './api-state.js';
import { eventually } from './poll.js';
import type { TestLocalStack } from './stack.js';

export type CrashOutcome = 'finished' | 'rolled-back';

export interface CrashScenario<F> {
  /** The machine or API action, as the report names it (`volume-create`, `PUT /attachments/{id}`). */
  name: string;
  /** Fixtures the operation needs, made before it starts (their calls are not crash points). */
  setup(): Promise<F>;
  /**
   * Starts the operation through the API. For a synchronous action the call itself may be what
   * crashes: the harness does not wait for it (a crashed request never answers).
   */
  start(fixtures: F): Promise<unknown>;
  /** 'finished' or 'rolled-back' once the operation ended; undefined while it still runs. */
  outcome(fixtures: F): Promise<CrashOutcome | undefined>;
  /** Effects the audit cannot see twice, by name, each to be made at most once. */
  effects?(fixtures: F): Promise<Record<string, number>>;
  /** Which recorded points to crash at; default every point that can have an effect. */
  only?(point: CrashPoint): boolean;
  /** Gives back what the fixtures hold (compute capacity: servers), after the checks; optional. */
  cleanup?(fixtures: F): Promise<void>;
  /** How long the operation may take once resumed (default 60 s). */
  timeoutMs?: number;
}

export interface CrashPoint {
  kind: string;
  /** Where it was seen: a backend host, a compute host, a machine name, `nova`. Not part of the fault: fresh fixtures may land elsewhere. */
  backend: string;
  method: string;
  /** 1 for the first call of this kind and method in the operation, 2 for the second... */
  occurrence: number;
  mode: 'crash' | 'crash-after';
}

export interface PointResult {
  scenario: string;
  point: string;
  /** finished / rolled-back: all three promises held; not-reached: the operation ended without passing the point; failed: see error. */
  result: CrashOutcome | 'not-reached' | 'failed';
  error?: string;
  ms: number;
  /** Where the time went, ms: setup, until the crash, the restart, until the outcome, the checks. */
  phases?: Record<string, number>;
}

/** The kinds of points a crash test aims at. */
export const CRASH_KINDS = ['volume', 'share', 'compute', 'cinder', 'step', 'step-before'] as const;

/** Driver methods that only read: a crash after one is a crash before whatever comes next. */
const READ_ONLY = /^(capabilities|list|get|describe|read|open|can|migrationCheckCompatibility|migrationGetProgress|connectionGetInfo|replicationTargets|close$|write$)/;

export const pointName = (p: CrashPoint): string => `${p.kind}:${p.backend}:${p.method}#${p.occurrence}${p.mode === 'crash-after' ? ' (after)' : ''}`;

/** The crash points of the calls an operation made, in order. */
export function pointsOf(calls: FaultCall[]): CrashPoint[] {
  const seen = new Map<string, number>();
  const points: CrashPoint[] = [];
  let firstStep = true;
  for (const c of calls) {
    if (!(CRASH_KINDS as readonly string[]).includes(c.kind)) continue;
    const key = `${c.kind}|${c.method}`;
    const occurrence = (seen.get(key) ?? 0) + 1;
    seen.set(key, occurrence);
    const isPoint = c.kind === 'step' || c.kind === 'step-before' || c.kind === 'cinder';
    if (!isPoint && READ_ONLY.test(c.method)) continue;
    // Before a step = after the one before it: only the very first step's is a point of its own.
    if (c.kind === 'step-before') {
      if (!firstStep) continue;
      firstStep = false;
    }
    points.push({ kind: c.kind, backend: c.backend, method: c.method, occurrence, mode: isPoint ? 'crash' : 'crash-after' });
  }
  return points;
}

async function endOf<F>(scenario: CrashScenario<F>, fixtures: F, timeoutMs: number): Promise<CrashOutcome> {
  await settleExecutions(timeoutMs);
  return eventually(async (note) => note(await scenario.outcome(fixtures)), `${scenario.name} finished or rolled back`, timeoutMs);
}

/** The effects every scenario counts: live attachments per volume and instance. */
async function commonEffects(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const a of await scanAllAttachments()) {
    if (!a.instanceUuid) continue;
    const key = `attachments of volume ${a.volumeId} for instance ${a.instanceUuid}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

const findingKey = (f: AuditFinding) => `${f.kind} ${f.resource}`;

/** The audit's findings now, as keys: a point is judged by the findings it adds, not by an earlier point's. */
async function findingKeys(): Promise<Set<string>> {
  return new Set((await runAudit()).findings.map(findingKey));
}

async function checkPromises<F>(scenario: CrashScenario<F>, fixtures: F, before: Set<string>): Promise<string[]> {
  const problems: string[] = [];
  const findings: AuditFinding[] = (await runAudit()).findings.filter((f) => !before.has(findingKey(f)));
  if (findings.length) problems.push(`audit: ${findings.map((f) => `${f.kind} ${f.resource}: ${f.detail}`).join('; ')}`);
  const effects = { ...(await commonEffects()), ...(await scenario.effects?.(fixtures)) };
  for (const [what, n] of Object.entries(effects)) if (n > 1) problems.push(`made twice: ${what} = ${n}`);
  return problems;
}

/** Runs the operation once without faults and returns the points it passed. */
export async function recordPoints<F>(scenario: CrashScenario<F>): Promise<CrashPoint[]> {
  const fixtures = await scenario.setup();
  const before = await findingKeys();
  clearFaultCalls();
  tracePoints(true);
  let calls: FaultCall[];
  try {
    await scenario.start(fixtures);
    const outcome = await endOf(scenario, fixtures, scenario.timeoutMs ?? 60_000);
    calls = faultCalls();
    if (outcome !== 'finished') throw new Error(`${scenario.name}: the clean run ended ${outcome}`);
  } finally {
    tracePoints(false);
  }
  const problems = await checkPromises(scenario, fixtures, before);
  if (problems.length) throw new Error(`${scenario.name}: the clean run already breaks a promise: ${problems.join(' | ')}`);
  await scenario.cleanup?.(fixtures);
  const points = pointsOf(calls);
  return scenario.only ? points.filter((p) => scenario.only!(p)) : points;
}

/** Crashes the operation at one point on fresh fixtures, restarts the stack, checks the promises. */
export async function crashAt<F>(stack: TestLocalStack, scenario: CrashScenario<F>, point: CrashPoint): Promise<PointResult> {
  const began = Date.now();
  const phases: Record<string, number> = {};
  let mark = began;
  const phase = (name: string) => {
    const t = Date.now();
    phases[name] = t - mark;
    mark = t;
  };
  const result = (r: PointResult['result'], error?: string): PointResult => ({ scenario: scenario.name, point: pointName(point), result: r, ...(error ? { error } : {}), ms: Date.now() - began, phases });
  const timeoutMs = scenario.timeoutMs ?? 60_000;
  try {
    const fixtures = await scenario.setup();
    const before = await findingKeys();
    phase('setup');
    clearFaults();
    clearFaultCalls();
    injectFault({ kind: point.kind, method: point.method, mode: point.mode, times: 1, ...(point.occurrence > 1 ? { skip: point.occurrence - 1 } : {}) });
    // A synchronous action that crashes never answers; its request fails when the stack stops.
    let answered = false;
    void scenario.start(fixtures).then(
      () => (answered = true),
      () => (answered = true),
    );
    const crashed = await eventually(
      async () => {
        if (crashedCalls().length) return 'crashed';
        if (answered && (await scenario.outcome(fixtures)) !== undefined && (await runningExecutions()).length === 0) return 'ended';
        return undefined;
      },
      `${scenario.name} to crash at ${pointName(point)}`,
      timeoutMs,
    );
    phase('crash');
    if (crashed === 'ended') {
      clearFaults();
      await scenario.cleanup?.(fixtures);
      return result('not-reached');
    }
    await stack.restart();
    phase('restart');
    const outcome = await endOf(scenario, fixtures, timeoutMs);
    phase('outcome');
    const problems = await checkPromises(scenario, fixtures, before);
    phase('checks');
    if (problems.length) return result('failed', problems.join(' | '));
    // Only after a point that held: a failed point's leftovers stay for whoever looks.
    await scenario.cleanup?.(fixtures);
    return result(outcome);
  } catch (e) {
    clearFaults();
    return result('failed', e instanceof Error ? e.message : String(e));
  }
}

/** The executions RUNNING now, of every machine. */
async function runningExecutions(): Promise<string[]> {
  const running: string[] = [];
  for (const m of STATE_MACHINES) {
    const out = await (await sfn()).send(new ListExecutionsCommand({ stateMachineArn: stateMachineArn(m.name), statusFilter: 'RUNNING' }));
    for (const e of out.executions ?? []) running.push(`${m.name}/${e.name}`);
  }
  return running;
}

/** Every point of a scenario, one after the other; the results in order. */
export async function crashEverywhere<F>(stack: TestLocalStack, scenario: CrashScenario<F>, pick?: (points: CrashPoint[]) => CrashPoint[]): Promise<PointResult[]> {
  const all = await recordPoints(scenario);
  const points = pick ? pick(all) : all;
  const results: PointResult[] = [];
  for (const point of points) {
    const r = await crashAt(stack, scenario, point);
    console.log(`crash ${r.scenario} @ ${r.point}: ${r.result} (${r.ms} ms ${JSON.stringify(r.phases)})${r.error ? ` — ${r.error.slice(0, 500)}` : ''}`);
    results.push(r);
  }
  return results;
}

/** A deterministic choice of `n` points (mulberry32 on `seed`), so a subset is the same on every run. */
export function seededPick(seed: number, n: number): (points: CrashPoint[]) => CrashPoint[] {
  return (points) => {
    let a = seed >>> 0;
    const next = () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    const pool = [...points];
    const out: CrashPoint[] = [];
    while (out.length < n && pool.length) out.push(pool.splice(Math.floor(next() * pool.length), 1)[0]!);
    return out;
  };
}

/** FERRY_CRASH_POINTS=n: only the first n points of each scenario (to try the matrix quickly). */
export function limitFromEnv(): ((points: CrashPoint[]) => CrashPoint[]) | undefined {
  const n = Number(process.env.FERRY_CRASH_POINTS);
  return n > 0 ? (points) => points.slice(0, n) : undefined;
}

/** Where a crash test file writes the points it covered and their outcome (the lead puts it in the note). */
export const CRASH_REPORT_DIR = join(tmpdir(), 'ferry-crash-report');

export function writeCrashReport(file: string, results: PointResult[]): string {
  mkdirSync(CRASH_REPORT_DIR, { recursive: true });
  const path = join(CRASH_REPORT_DIR, `${file}.json`);
  writeFileSync(path, JSON.stringify(results, null, 2));
  return path;
}

type StartDynamo = (options?: { dataDir?: string; port?: number }) => Promise<{ endpoint: string; port: number; stop(): Promise<void> }>;
const keptDynamos = new Map<string, Awaited<ReturnType<StartDynamo>>>();

/**
 * A crash kills Ferry — its functions, the executions, the HTTP server — not DynamoDB, which on
 * AWS is a managed service; a restart then only starts Ferry again. Crash test files mock
 * infra/local/dynamo.js with this, so a restart keeps the running DynamoDB Local (same data
 * directory) instead of waiting for a new JVM (25-45 s on a loaded 2-core machine, a minute per
 * point): `vi.mock('../../infra/local/dynamo.js', async (real) => keepDynamoAcrossRestarts(await real()))`.
 * The real kill of a whole stack, DynamoDB Local with it, is the kill -9 test of
 * test/integration/share-migration-failures. `stopKeptDynamos()` in afterAll ends them.
 */
export function keepDynamoAcrossRestarts<M extends { startDynamo: StartDynamo }>(real: M): M {
  const startDynamo: StartDynamo = async (options = {}) => {
    const key = options.dataDir ?? '(memory)';
    let kept = keptDynamos.get(key);
    if (!kept) {
      kept = await real.startDynamo(options);
      keptDynamos.set(key, kept);
    }
    return { endpoint: kept.endpoint, port: kept.port, stop: async () => undefined };
  };
  return { ...real, startDynamo };
}

/**
 * The other half of keeping DynamoDB Local across restarts: a start stops a DynamoDB Local it finds
 * on its data directory (left by a stack killed alone, infra/local/orphaned-dynamo.ts); the kept
 * one is not an orphan. `vi.mock('../../infra/local/orphaned-dynamo.js', async (real) => spareKeptDynamos(await real<...>()))`.
 */
export function spareKeptDynamos<M extends { stopOrphanedDynamo: (dbPath: string, graceMs?: number) => Promise<number[]> }>(real: M): M {
  return { ...real, stopOrphanedDynamo: async (dbPath: string, graceMs?: number) => (keptDynamos.has(dbPath) ? [] : real.stopOrphanedDynamo(dbPath, graceMs)) };
}

export async function stopKeptDynamos(): Promise<void> {
  for (const [key, kept] of keptDynamos) {
    keptDynamos.delete(key);
    await kept.stop();
  }
}

interface AslStates {
  StartAt: string;
  States: Record<string, { Type: string; Next?: string; Default?: string; Choices?: { Next: string }[]; ItemProcessor?: AslStates; Iterator?: AslStates; Branches?: AslStates[] }>;
}

/**
 * The step points of a machine's forward path, read from its ASL file: every Task reachable from
 * StartAt by Next, Choices and Default (into Map and Parallel bodies), Catch targets left out —
 * what a subset can crash at without a clean run first. A Choice may skip some: then not-reached.
 */
export function forwardStepPoints(machine: string): CrashPoint[] {
  const wiring = STATE_MACHINES.find((m) => m.name === machine);
  if (!wiring) throw new Error(`no state machine ${machine}`);
  const asl = JSON.parse(readFileSync(join(REPO_ROOT, wiring.file), 'utf8')) as AslStates;
  const points: CrashPoint[] = [];
  const walk = (states: AslStates) => {
    const seen = new Set<string>();
    const queue = [states.StartAt];
    while (queue.length) {
      const name = queue.shift()!;
      if (seen.has(name)) continue;
      seen.add(name);
      const s = states.States[name]!;
      if (s.Type === 'Task') points.push({ kind: 'step', backend: machine, method: name, occurrence: 1, mode: 'crash' });
      for (const body of [s.ItemProcessor, s.Iterator, ...(s.Branches ?? [])]) if (body) walk(body);
      for (const next of [s.Next, s.Default, ...(s.Choices ?? []).map((c) => c.Next)]) if (next) queue.push(next);
    }
  };
  walk(asl);
  return points;
}

/**
 * bench/moves/profile.ts: where the time of one server move goes, on the local stack (issue 17).
 * The server is the one bench/moves/run.ts moves (1 GiB root disk with 10 MiB scattered over it,
 * one attached volume); a hard reboot of it is profiled first (the baseline), then the flow asked
 * for, BENCH_PROFILE_REPEATS times each (default 1). For each run it prints:
 * - the states the execution entered, with when they started and how long each took;
 * - DynamoDB requests per state, and per command and table, with the time spent waiting on them;
 * - compute driver calls and their time;
 * - what no state covers: the API call, the gap before the execution's first state, between
 *   states, and from its end until the bench's poll saw the server settle;
 * - the event loop's delay (p50/max), which shows a saturated process.
 *
 *   BENCH_FLOW=live npm run bench:moves:profile     (live | cold | swap | shelve | evacuate | cross-cell)
 *
 * It patches the interpreter's StateMachine.run and the local compute driver's prototype to see
 * them: a profiling tool, never imported by the stack.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { StateMachine } from 'aws-local-stepfunctions';
import { db } from '../../functions/core/db.js';
import { resetPolicyCache } from '../../functions/core/policy.js';
import { LocalComputeDriver } from '../../functions/drivers/compute/local.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { findCopies } from '../../functions/servers/repo.js';
import { startLocalStack } from '../../infra/local/stack.js';
import { stackCpuSeconds } from '../support/cpu.js';
import { writeRootData } from './cross-cell.js';
import { runBench } from '../support/run-bench.js';

const FLOW = process.env.BENCH_FLOW ?? 'live';
const REPEATS = Number(process.env.BENCH_PROFILE_REPEATS ?? 1);

/** The flows that are server actions: each step's title, action body and the vm_state it ends in. */
const ACTION_FLOWS: Record<string, [string, Record<string, unknown>, string][]> = {
  live: [['live migration', { 'os-migrateLive': { host: null, block_migration: 'auto' } }, 'active']],
  cold: [
    ['cold migrate', { migrate: null }, 'resized'],
    ['resize confirm', { confirmResize: null }, 'active'],
  ],
  shelve: [
    ['shelve + offload', { shelve: null }, 'shelved_offloaded'],
    ['unshelve', { unshelve: null }, 'active'],
  ],
  'cross-cell': [
    ['cross-cell resize', { resize: { flavorRef: '3' } }, 'resized'],
    ['cross-cell confirm', { confirmResize: null }, 'active'],
  ],
};

interface Mark {
  at: number;
  kind: 'state-in' | 'state-out' | 'ddb' | 'driver';
  name: string;
  ms?: number;
  detail?: string;
}

/** Everything seen while recording is on (one flow at a time). */
const marks: Mark[] = [];
let recording = false;
const mark = (m: Mark) => {
  if (recording) marks.push(m);
};
const polling = new AsyncLocalStorage<true>();

function tablesOf(input: Record<string, any>): string {
  if (input.TableName) return String(input.TableName);
  const items: any[] = input.TransactItems ?? [];
  if (items.length) return [...new Set(items.map((i) => Object.values(i as Record<string, any>)[0]?.TableName))].join('+') + ` (${items.length} items)`;
  if (input.RequestItems) return Object.keys(input.RequestItems).join('+');
  return '?';
}

/** The functions/ frames of a stack (core/db.ts left out), innermost first: who sent a request. */
function callers(stack: string): string {
  return stack
    .split('\n')
    .map((l) => /functions\/([\w/.-]+):(\d+)/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && !m[1]!.startsWith('core/db.'))
    .slice(0, 4)
    .map((m) => `${m[1]}:${m[2]}`)
    .join(' < ');
}

/** The stack's DynamoDB client is made when it starts: this runs after. */
function instrumentDynamo(): void {
  db().middlewareStack.add(
    (next, context) => async (args) => {
      if (polling.getStore()) return next(args);
      const t0 = performance.now();
      const where = process.env.BENCH_PROFILE_SEQUENCE ? callers(new Error().stack ?? '') : undefined;
      try {
        return await next(args);
      } finally {
        mark({ at: t0, kind: 'ddb', name: `${context.commandName ?? '?'} ${tablesOf(args.input as Record<string, any>)}`, ms: performance.now() - t0, detail: where });
      }
    },
    { step: 'initialize', name: 'benchProfileCounter' },
  );
}

function instrument(): void {
  const run = StateMachine.prototype.run;
  StateMachine.prototype.run = function (this: StateMachine, ...args: Parameters<StateMachine['run']>) {
    const execution = run.apply(this, args);
    const events = execution.eventLogs;
    const tee = (async function* () {
      for await (const e of events) {
        const ev = e as { type: string; state?: { name: string } };
        if (ev.type === 'StateEntered') mark({ at: performance.now(), kind: 'state-in', name: ev.state!.name });
        if (ev.type === 'StateExited' || ev.type === 'StateFailed') mark({ at: performance.now(), kind: 'state-out', name: ev.state!.name });
        // A Task retried by its Retry (after its IntervalSeconds) or failed: shown among the driver calls with its error.
        if (ev.type === 'StateRetried' || ev.type === 'StateFailed') mark({ at: performance.now(), kind: 'driver', name: `${ev.type} ${ev.state!.name}: ${JSON.stringify((e as { Error?: unknown }).Error ?? '')}`, ms: 0 });
        yield e;
      }
    })();
    return Object.assign(execution, { eventLogs: tee });
  } as StateMachine['run'];
  const proto = LocalComputeDriver.prototype as unknown as Record<string, unknown>;
  for (const name of Object.getOwnPropertyNames(proto)) {
    const fn = proto[name];
    if (name === 'constructor' || typeof fn !== 'function') continue;
    proto[name] = async function (this: unknown, ...a: unknown[]) {
      const t0 = performance.now();
      const host = (this as LocalComputeDriver).host;
      try {
        return await (fn as (...x: unknown[]) => Promise<unknown>).apply(this, a);
      } finally {
        if (!polling.getStore()) mark({ at: t0, kind: 'driver', name: `${name}@${host}`, ms: performance.now() - t0 });
      }
    };
  }
}

function report(title: string, t0: number, apiMs: number, total: number, loop: { p50: number; max: number }, cpuMs: number): void {
  const rel = (t: number) => (t - t0).toFixed(0).padStart(6);
  console.log(`\n== ${title}: ${total.toFixed(0)} ms, ${cpuMs.toFixed(0)} ms CPU of the stack (API call ${apiMs.toFixed(0)} ms; event loop delay p50 ${loop.p50.toFixed(1)} ms, max ${loop.max.toFixed(0)} ms; load ${loadavg()[0]!.toFixed(1)})`);
  // States: each Task's span, with the DynamoDB requests and driver time inside it.
  const spans: { name: string; from: number; to: number }[] = [];
  const open = new Map<string, number>();
  for (const m of marks) {
    if (m.kind === 'state-in') open.set(m.name, m.at);
    if (m.kind === 'state-out' && open.has(m.name)) {
      spans.push({ name: m.name, from: open.get(m.name)!, to: m.at });
      open.delete(m.name);
    }
  }
  spans.sort((a, b) => a.from - b.from);
  const inSpan = (m: Mark, s: { from: number; to: number }) => m.at >= s.from && m.at <= s.to;
  console.log('   start     ms  state                              ddb   ddb ms  driver ms');
  for (const s of spans) {
    const ddb = marks.filter((m) => m.kind === 'ddb' && inSpan(m, s));
    const drv = marks.filter((m) => m.kind === 'driver' && inSpan(m, s));
    const sum = (ms: Mark[]) => ms.reduce((a, m) => a + (m.ms ?? 0), 0);
    console.log(`  ${rel(s.from)} ${(s.to - s.from).toFixed(0).padStart(6)}  ${s.name.padEnd(34)} ${String(ddb.length).padStart(4)} ${sum(ddb).toFixed(0).padStart(8)} ${sum(drv).toFixed(0).padStart(10)}`);
  }
  // What no state covers.
  const first = spans[0]?.from ?? t0 + total;
  const last = spans.reduce((a, s) => Math.max(a, s.to), first);
  let between = 0;
  for (let i = 1; i < spans.length; i++) between += Math.max(0, spans[i]!.from - spans.slice(0, i).reduce((a, s) => Math.max(a, s.to), 0));
  console.log(`  uncovered: before the first state ${(first - t0).toFixed(0)} ms (API call ${apiMs.toFixed(0)}), between states ${between.toFixed(0)} ms, after the last until settled ${(t0 + total - last).toFixed(0)} ms`);
  const ddbOutside = marks.filter((m) => m.kind === 'ddb' && !spans.some((s) => inSpan(m, s)));
  console.log(`  DynamoDB outside states (the API call): ${ddbOutside.length} requests, ${ddbOutside.reduce((a, m) => a + m.ms!, 0).toFixed(0)} ms`);
  const byKind = new Map<string, { n: number; ms: number }>();
  for (const m of marks.filter((x) => x.kind === 'ddb')) {
    const k = byKind.get(m.name) ?? { n: 0, ms: 0 };
    byKind.set(m.name, { n: k.n + 1, ms: k.ms + m.ms! });
  }
  const totalDdb = [...byKind.values()].reduce((a, k) => a + k.n, 0);
  console.log(`  DynamoDB by command and table (${totalDdb} requests):`);
  for (const [name, k] of [...byKind].sort((a, b) => b[1].n - a[1].n)) console.log(`    ${String(k.n).padStart(4)} ${k.ms.toFixed(0).padStart(6)} ms  ${name}`);
  if (process.env.BENCH_PROFILE_SEQUENCE) {
    console.log('  every request and driver call, in order:');
    for (const m of marks.filter((x) => x.kind !== 'state-out')) console.log(`    ${rel(m.at)} ${(m.ms ?? 0).toFixed(0).padStart(5)} ms  ${m.kind === 'state-in' ? '>> ' : m.kind === 'driver' ? '*  ' : '   '}${m.name}${m.detail ? `  [${m.detail}]` : ''}`);
  }
  console.log('  driver calls:');
  for (const m of marks.filter((x) => x.kind === 'driver')) console.log(`    ${rel(m.at)} ${m.ms!.toFixed(0).padStart(6)} ms  ${m.name}`);
}

async function main(): Promise<void> {
  instrument();
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-profile-'));
  const stack = await startLocalStack({ dataDir, port: 0, quiet: true });
  // The start's reconcile pass runs after the stack answers: ended before anything is measured.
  await stack.reconciled;
  instrumentDynamo();
  const headers = { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', Accept: 'application/json' };
  const call = async (base: string, method: string, path: string, body: unknown, version: string): Promise<any> => {
    const res = await fetch(`${stack.url}${base}${path}`, { method, headers: { ...headers, 'OpenStack-API-Version': version }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 400) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
  const nova = (method: string, path: string, body?: unknown) => call('/compute/v2.1', method, path, body, 'compute 2.93');
  const cinder = (method: string, path: string, body?: unknown) => call('/volume/v3/admin', method, path, body, 'volume 3.70');
  const action = (id: string, body: unknown) => nova('POST', `/servers/${id}/action`, body);
  // The same settle poll as run.ts (10 ms for half a second, then 25 ms), outside the counts.
  const settle = async (id: string): Promise<Record<string, any>> => {
    const t0 = performance.now();
    for (;;) {
      const copies = await polling.run(true, () => findCopies(id));
      if (!copies[0]) return {};
      if (!copies.some((c) => c.instance.operation) && !copies[0].instance.hidden) return copies[0].instance as unknown as Record<string, any>;
      await new Promise((r) => setTimeout(r, performance.now() - t0 < 500 ? 10 : 25));
    }
  };
  const newVolume = async (): Promise<string> => {
    const id = (await cinder('POST', '/volumes', { volume: { size: 1, name: 'bench' } })).volume.id as string;
    while ((await cinder('GET', `/volumes/${id}`)).volume.status !== 'available') await new Promise((r) => setTimeout(r, 20));
    return id;
  };
  const boot = async (): Promise<string> => {
    const id = (await nova('POST', '/servers', { server: { name: 'bench', flavorRef: '1', networks: 'auto', host: 'cmp1', imageRef: SANDBOX_IMAGES.cirrosTiny.id } })).server.id as string;
    await settle(id);
    await writeRootData(id, String((await settle(id)).host), Array.from({ length: 10 }, (_, k) => k * 100));
    await nova('POST', `/servers/${id}/os-volume_attachments`, { volumeAttachment: { volumeId: await newVolume() } });
    await settle(id);
    return id;
  };
  const profiled = async (title: string, id: string, act: () => Promise<unknown>, expectVm: string) => {
    const loop = monitorEventLoopDelay({ resolution: 5 });
    marks.length = 0;
    recording = true;
    loop.enable();
    const cpu0 = stackCpuSeconds();
    const t0 = performance.now();
    await act();
    const apiMs = performance.now() - t0;
    const s = await settle(id);
    const total = performance.now() - t0;
    const cpuMs = (stackCpuSeconds() - cpu0) * 1000;
    loop.disable();
    recording = false;
    if (s.vmState !== expectVm) throw new Error(`${title}: expected ${expectVm}, got ${String(s.vmState)} ${JSON.stringify(s.fault)}`);
    report(title, t0, apiMs, total, { p50: loop.percentile(50) / 1e6, max: loop.max / 1e6 }, cpuMs);
  };
  const forceDown = async (host: string, down: boolean) => {
    const svc = (await nova('GET', `/os-services?host=${host}&binary=nova-compute`)).services[0];
    await nova('PUT', `/os-services/${svc.id}`, { forced_down: down });
  };

  for (let r = 0; r < REPEATS; r++) {
    const id = await boot();
    await profiled('hard reboot (baseline)', id, () => action(id, { reboot: { type: 'HARD' } }), 'active');
    if (FLOW === 'cross-cell') {
      process.env.FERRY_POLICY = JSON.stringify({ 'compute:servers:resize:cross_cell': 'admin_or_owner' });
      resetPolicyCache();
    }
    if (FLOW === 'swap') {
      const other = await newVolume();
      const data = (await nova('GET', `/servers/${id}/os-volume_attachments`)).volumeAttachments[0].volumeId as string;
      await profiled('swap', id, () => nova('PUT', `/servers/${id}/os-volume_attachments/${data}`, { volumeAttachment: { volumeId: other } }), 'active');
    } else if (FLOW === 'evacuate') {
      const host = String((await settle(id)).host);
      await forceDown(host, true);
      await profiled('evacuate', id, () => action(id, { evacuate: {} }), 'active');
      await forceDown(host, false);
    } else {
      const actions = ACTION_FLOWS[FLOW];
      if (!actions) throw new Error(`BENCH_FLOW ${FLOW}: one of live, cold, swap, shelve, evacuate, cross-cell`);
      for (const [title, body, expectVm] of actions) await profiled(title, id, () => action(id, body), expectVm);
    }
    await nova('DELETE', `/servers/${id}`);
    await settle(id);
  }
  await stack.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

runBench(main);

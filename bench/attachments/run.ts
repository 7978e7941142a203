/**
 * bench/attachments: attachment create -> update -> complete -> delete cycles against the local
 * stack over HTTP, with 1 client and with 32 concurrent clients (each on its own volume).
 *
 * Prints p50/p99 per call and DynamoDB requests per API call (goal: at most 3), and the requests of
 * the calls the cycle does not make (a PUT moving an attachment to another host, os-detach and
 * os-terminate_connection removing a host's last connection), counted with one client. Absolute times
 * drift on a noisy machine, so it also prints ratios against baselines measured in the same run:
 * a single DynamoDB GetItem round trip (how many round trips an API call costs), and the
 * DynamoDB-only ceiling (the bare DynamoDB work of the same number of calls, run by as many loops
 * as there are clients). The ceiling is measured BESIDE the API calls, in interleaved rounds
 * (ceiling, API, ceiling, API, ...), so the machine's load drifts alike over both; the ratio is
 * printed per round and its median is the figure.
 *
 * After each 32-client round, the DynamoDB requests of one recorded API cycle are sent again from
 * bare loops (replay.ts), as the API sent them (with the attachment's state in its volume item:
 * the intent, the connect and the complete one UpdateItem each): what the request shape alone
 * reaches against the same ceiling, and the API against its own requests.
 *
 * Each round also prints the CPU milliseconds per call of this node process (client, front door,
 * handlers, SDK) and of the DynamoDB Local JVM, in the ceiling's loops and in the API calls: where
 * the API's extra cost is, in a figure the machine's load does not move as it moves throughput.
 *
 * The HTTP client runs in this process too, so its CPU counts against the API: by default it is
 * node:http with a keep-alive Agent, the lightest real HTTP client at hand (an upstream client
 * spends its own in a process of its own); BENCH_CLIENT=fetch measures with the global fetch
 * (undici) instead, as the bench did before (bench/attachments/client.ts). The first line says which.
 *
 *   npm run bench:attachments     (BENCH_CYCLES=50 cycles per client in all, over BENCH_ROUNDS=4 rounds)
 *   BENCH_CLIENT=fetch            the API's calls through fetch rather than node:http
 *   BENCH_PROFILE=FILE            a V8 CPU profile of the 32-client API rounds only (FILE.cpuprofile), its top self times printed
 */
import { GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { startLocalStack } from '../../infra/local/stack.js';
import { Recorder, fmt, percentile } from '../support/stats.js';
import { runBench } from '../support/run-bench.js';
import { benchClientKind, jsonClient } from './client.js';
import { childJvmPids, cpuNow, cpuSince, SpanProfiler, type CpuSnapshot } from './cpu.js';
import { recordCycle, replay, type RecordedCycle } from './replay.js';

const CYCLES = Number(process.env.BENCH_CYCLES ?? 50);
const ROUNDS = Math.max(1, Math.min(CYCLES, Number(process.env.BENCH_ROUNDS ?? 4)));
const CLIENTS = 32;
const HEADERS = { 'X-Auth-Token': 'demo:demo', 'OpenStack-API-Version': 'volume 3.70', 'Content-Type': 'application/json' };
const CLIENT = benchClientKind();
const call = jsonClient(CLIENT);

async function api(base: string, method: string, path: string, body?: unknown, version = '3.70'): Promise<any> {
  const headers = version === '3.70' ? HEADERS : { ...HEADERS, 'OpenStack-API-Version': `volume ${version}` };
  const { status, text } = await call(base + path, method, headers, body);
  if (status >= 400) throw new Error(`${method} ${path} -> ${status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

async function createVolumes(base: string, n: number): Promise<string[]> {
  // The demo project's default volume quota (10, as Cinder's quota_volumes) is below one volume
  // per client: an admin raises it for this stack's throwaway data.
  const admin = { ...HEADERS, 'X-Auth-Token': 'admin:admin' };
  const quota = await call(`${base}/os-quota-sets/demo`, 'PUT', admin, { quota_set: { volumes: n } });
  if (quota.status >= 400) throw new Error(`PUT os-quota-sets/demo -> ${quota.status} ${quota.text}`);
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push((await api(base, 'POST', '/volumes', { volume: { size: 1, name: `bench-${i}` } })).volume.id);
  for (const id of ids) {
    for (let i = 0; ; i++) {
      const v = (await api(base, 'GET', `/volumes/${id}`)).volume;
      if (v.status === 'available') break;
      if (v.status.startsWith('error') || i > 600) throw new Error(`volume ${id}: ${v.status}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return ids;
}

/** With one client the calls are sequential, so the counter's delta around a call is that call's own requests. */
const perCall = new Map<string, number[]>();
async function counted<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const before = dynamoRequests().total;
  const out = await fn();
  perCall.set(name, [...(perCall.get(name) ?? []), dynamoRequests().total - before]);
  return out;
}

/** One cycle on `volumeId`: the id of the attachment it created (and deleted). */
async function cycle(base: string, rec: Recorder, volumeId: string, instance: string, host: string): Promise<string> {
  const att = (await rec.time('create', () => counted('create', () => api(base, 'POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: instance, connector: null } })))).attachment;
  await rec.time('update', () => counted('update', () => api(base, 'PUT', `/attachments/${att.id}`, { attachment: { connector: { host, initiator: 'iqn.bench', ip: '127.0.0.1', platform: 'x86_64', os_type: 'linux2', multipath: false, mountpoint: '/dev/vdb' } } })));
  await rec.time('complete', () => counted('complete', () => api(base, 'POST', `/attachments/${att.id}/action`, { 'os-complete': null })));
  await rec.time('delete', () => counted('delete', () => api(base, 'DELETE', `/attachments/${att.id}`)));
  return att.id;
}

/**
 * The calls the cycle does not make, counted with one client (not timed): a PUT moving a connected
 * attachment to another host, and the pre-3.27 actions removing a host's last connection.
 */
async function otherPaths(base: string, volumeId: string, cycles: number): Promise<void> {
  const bench = (host: string) => ({ host, initiator: `iqn.bench:${host}`, ip: '127.0.0.1', platform: 'x86_64', os_type: 'linux2', multipath: false });
  const action = (body: unknown) => api(base, 'POST', `/volumes/${volumeId}/action`, body, '3.0');
  for (let i = 0; i < cycles; i++) {
    const att = (await api(base, 'POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: '00000000-0000-4000-8000-0000000000aa', connector: bench('bench-from') } })).attachment;
    await api(base, 'POST', `/attachments/${att.id}/action`, { 'os-complete': null });
    await counted('update moving host', () => api(base, 'PUT', `/attachments/${att.id}`, { attachment: { connector: bench('bench-to') } }));
    await api(base, 'DELETE', `/attachments/${att.id}`);
    await action({ 'os-initialize_connection': { connector: bench('bench-legacy') } });
    await action({ 'os-attach': { instance_uuid: '00000000-0000-4000-8000-0000000000bb', mountpoint: '/dev/vdb' } });
    await counted('os-detach', () => action({ 'os-detach': null }));
    await action({ 'os-initialize_connection': { connector: bench('bench-legacy') } });
    await counted('os-terminate_connection', () => action({ 'os-terminate_connection': { connector: bench('bench-legacy') } }));
  }
}

interface ApiRun {
  rec: Recorder;
  seconds: number;
  requests: number;
  /** CPU per call in the API rounds and in the ceiling's rounds, each round's figure. */
  cpu: { api: CpuSnapshot[]; ceiling: CpuSnapshot[] };
}

/** `cycles` cycles by each of `clients` clients at once, recorded into `rec`: the seconds and DynamoDB requests they took. */
async function runApi(base: string, volumes: string[], clients: number, cycles: number, rec: Recorder): Promise<{ seconds: number; requests: number }> {
  resetDynamoRequests();
  const t0 = performance.now();
  await Promise.all(
    volumes.slice(0, clients).map(async (vol, c) => {
      for (let i = 0; i < cycles; i++) await cycle(base, rec, vol, `00000000-0000-4000-8000-${String(c).padStart(12, '0')}`, `bench-host-${c}`);
    }),
  );
  return { seconds: (performance.now() - t0) / 1000, requests: dynamoRequests().total };
}

async function baselineGetItem(volumeId: string, n = 200): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await db().send(new GetCommand({ TableName: tableName('volume'), Key: { pk: `VOL#${volumeId}`, sk: 'VOL' } }));
    samples.push(performance.now() - t0);
  }
  return percentile(samples, 50);
}

/**
 * The bare DynamoDB work of one attachment API call (two reads and one two-item transaction), run
 * by `clients` loops at once: the ceiling the database itself puts on the API's throughput.
 */
async function dynamoCeiling(clients: number, perClient: number): Promise<number> {
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      const key = (k: string) => ({ pk: `BENCH#${c}`, sk: k });
      for (let i = 0; i < perClient; i++) {
        await db().send(new GetCommand({ TableName: tableName('volume'), Key: key('A') }));
        await db().send(new GetCommand({ TableName: tableName('volume'), Key: key('B') }));
        await db().send(
          new TransactWriteCommand({
            TransactItems: [
              { Put: { TableName: tableName('volume'), Item: { ...key('A'), n: i } } },
              { Update: { TableName: tableName('volume'), Key: key('B'), UpdateExpression: 'ADD n :one', ExpressionAttributeValues: { ':one': 1 } } },
            ],
          }),
        );
      }
    }),
  );
  return (clients * perClient) / ((performance.now() - t0) / 1000);
}

function report(label: string, r: ApiRun, getItemP50: number): number {
  const calls = r.rec.count();
  const throughput = calls / r.seconds;
  console.log(`\n${label}: ${calls} API calls in ${r.seconds.toFixed(1)} s = ${throughput.toFixed(1)} calls/s; DynamoDB requests per API call: ${(r.requests / calls).toFixed(2)} (goal <= 3)`);
  for (const [name, s] of r.rec.samples) {
    const p50 = percentile(s, 50);
    console.log(`  ${name.padEnd(9)} p50 ${fmt(p50).padStart(10)}  p99 ${fmt(percentile(s, 99)).padStart(10)}  p50/GetItem ${(p50 / getItemP50).toFixed(1)}x`);
  }
  return throughput;
}

/** The middle value (the mean of the two middle ones for an even count). */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** One API cycle on the spare volume, recorded for the replays (its requests, in order). */
async function recordApiCycle(base: string, volumeId: string): Promise<RecordedCycle> {
  const instance = '00000000-0000-4000-8000-0000000000cc';
  const host = 'bench-host-recorded';
  // A first cycle unrecorded: the recorded one goes as the rounds' cycles do, on a volume this process remembers.
  await cycle(base, new Recorder(), volumeId, instance, host);
  return recordCycle({ volume: volumeId, instance, host }, () => cycle(base, new Recorder(), volumeId, instance, host));
}

const loadText = () => loadavg().map((l) => l.toFixed(1)).join(' ');

/**
 * ROUNDS rounds of: the DynamoDB-only ceiling with `clients` loops, then the API with `clients`
 * clients, each round doing about the same number of calls in both (CYCLES/ROUNDS cycles of 4
 * calls per client). Each round's ratio compares two measurements a few seconds apart.
 */
async function interleaved(base: string, volumes: string[], clients: number, profiler?: SpanProfiler, recorded?: RecordedCycle): Promise<{ api: ApiRun; ratios: number[]; replays: number[] }> {
  const rec = new Recorder();
  const api: ApiRun = { rec, seconds: 0, requests: 0, cpu: { api: [], ceiling: [] } };
  const ratios: number[] = [];
  const replays: number[] = [];
  // Each replay runs on fresh copies of the recorded volume (replay.ts).
  let copiesUsed = 0;
  const jvm = childJvmPids();
  const perCallOf = (cpu: CpuSnapshot, calls: number): CpuSnapshot => ({ nodeMs: cpu.nodeMs / calls, jvmMs: cpu.jvmMs / calls });
  for (let round = 0; round < ROUNDS; round++) {
    const cycles = Math.floor(CYCLES / ROUNDS) + (round < CYCLES % ROUNDS ? 1 : 0);
    let cpu = cpuNow(jvm);
    const ceiling = await dynamoCeiling(clients, cycles * 4);
    const ceilingCpu = perCallOf(cpuSince(cpu, jvm), clients * cycles * 4);
    const callsBefore = rec.count();
    await profiler?.start();
    cpu = cpuNow(jvm);
    const r = await runApi(base, volumes, clients, cycles, rec);
    const apiCpu = perCallOf(cpuSince(cpu, jvm), rec.count() - callsBefore);
    await profiler?.stop();
    api.seconds += r.seconds;
    api.requests += r.requests;
    api.cpu.api.push(apiCpu);
    api.cpu.ceiling.push(ceilingCpu);
    const throughput = (rec.count() - callsBefore) / r.seconds;
    ratios.push(throughput / ceiling);
    // Cores kept busy (calls a second x CPU seconds a call): under the machine's two, the side is
    // bound by something else, at 32 clients DynamoDB Local's writes, applied nearly one at a time
    // (docs/attachments-bench.md, "What bounds the 32-client ratio").
    const cores = (perSecond: number, cpu: CpuSnapshot) => `${((perSecond * (cpu.nodeMs + cpu.jvmMs)) / 1000).toFixed(2)} (JVM ${((perSecond * cpu.jvmMs) / 1000).toFixed(2)})`;
    console.log(
      `  ${clients} client(s), round ${round + 1}/${ROUNDS}: ceiling ${ceiling.toFixed(1)}/s, API ${throughput.toFixed(1)} calls/s, ratio ${(throughput / ceiling).toFixed(2)}x; ` +
        `CPU ms per call node ${ceilingCpu.nodeMs.toFixed(2)} / ${apiCpu.nodeMs.toFixed(2)}, JVM ${ceilingCpu.jvmMs.toFixed(2)} / ${apiCpu.jvmMs.toFixed(2)} (ceiling / API); ` +
        `cores busy ${cores(ceiling, ceilingCpu)} / ${cores(throughput, apiCpu)} (load ${loadText()})`,
    );
    if (!recorded) continue;
    const replayed = (await replay(recorded, clients, cycles, copiesUsed)) / ceiling;
    copiesUsed += clients;
    replays.push(replayed);
    console.log(`    the API's requests replayed straight to DynamoDB / ceiling: ${replayed.toFixed(2)}x`);
  }
  return { api, ratios, replays };
}

// The stack's replicator reads the backend records every second in this same process; it would
// add its requests to the API's count. No replicated volume is involved here: let it sleep.
process.env.FERRY_REPLICATION_INTERVAL_MS ??= String(24 * 3600_000);
// The same for the reconciler's timer (its run at start comes before any count).
process.env.FERRY_RECONCILE_INTERVAL ??= '0';

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-'));
  const stack = await startLocalStack({ dataDir, port: 0, quiet: true });
  // The start's reconcile pass runs after the stack answers: ended before anything is measured.
  await stack.reconciled;
  try {
    const base = `${stack.url}/volume/v3`;
    // One volume per client, and a spare one for the cycle the replays record.
    const volumes = await createVolumes(base, CLIENTS + 1);
    const getItemP50 = await baselineGetItem(volumes[0]!);
    console.log(`bench/attachments: ${CYCLES} cycles per client over ${ROUNDS} rounds, HTTP client ${CLIENT === 'http' ? 'node:http (keep-alive Agent)' : 'fetch (undici)'}; baseline DynamoDB GetItem p50 ${fmt(getItemP50)}; load average ${loadText()}`);
    const one = await interleaved(base, volumes, 1);
    const oneThroughput = report('1 client', one.api, getItemP50);
    await otherPaths(base, volumes[0]!, 5);
    console.log('  DynamoDB requests per call (1 client, exact): ' + [...perCall].map(([n, v]) => `${n} ${(v.reduce((a, b) => a + b, 0) / v.length).toFixed(2)}`).join(', '));
    perCall.clear();
    const profiler = new SpanProfiler(process.env.BENCH_PROFILE);
    const recorded = await recordApiCycle(base, volumes[CLIENTS]!);
    const many = await interleaved(base, volumes, CLIENTS, profiler, recorded);
    const manyThroughput = report(`${CLIENTS} clients`, many.api, getItemP50);
    console.log(`\nthroughput ratio ${CLIENTS} clients / 1 client: ${(manyThroughput / oneThroughput).toFixed(2)}x`);
    console.log('DynamoDB-only ceiling: 2 GetItems + 1 two-item TransactWriteItems per call, as many loops as clients, measured before each API round');
    for (const [label, r] of [['1 client', one], [`${CLIENTS} clients`, many]] as const) {
      console.log(`API throughput / DynamoDB-only ceiling, ${label}: median ${median(r.ratios).toFixed(2)}x (rounds ${r.ratios.map((x) => x.toFixed(2)).join(', ')})`);
      const { api: apiCpu, ceiling: ceilingCpu } = r.api.cpu;
      const med = (xs: CpuSnapshot[], k: keyof CpuSnapshot) => median(xs.map((x) => x[k])).toFixed(2);
      console.log(`  CPU ms per call, median of rounds: node ${med(ceilingCpu, 'nodeMs')} (ceiling) / ${med(apiCpu, 'nodeMs')} (API), JVM ${med(ceilingCpu, 'jvmMs')} / ${med(apiCpu, 'jvmMs')}`);
    }
    const replays = many.replays;
    console.log(`The API's requests replayed straight to DynamoDB / ceiling, ${CLIENTS} clients: median ${median(replays).toFixed(2)}x (rounds ${replays.map((x) => x.toFixed(2)).join(', ')})`);
    console.log(`  the API / its own requests replayed (Ferry's own cost, per round): median ${median(many.ratios.map((r, i) => r / replays[i]!)).toFixed(2)}x`);
    profiler.finish();
    console.log(`load average at the end: ${loadText()}`);
  } finally {
    await stack.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runBench(main);

/**
 * bench/moves: every server flow of issue 5 on the local stack, each on a server with one
 * attached data volume and 10 MiB of data scattered over its 1 GiB root disk (and the boot from
 * volume), measuring per flow:
 * - wall time from the API call until the server settles (no operation in flight);
 * - calls to the attachments API (attachment_create/update/complete/delete/get) and other Cinder
 *   calls Nova makes (volume get, begin/roll_detaching), against the reference's attachments-API
 *   call count for the same flow (nova.md §2.1 / the vol_test traces, one volume);
 * - DynamoDB requests (all tables; the bench's own polling for the end is not counted): the flow's
 *   own, and all of them. Beside a flow the stack also sends requests that are not the flow's: the
 *   volume replicator's scheduled pass (a Query and a GetItem about every second, so a slow flow
 *   counts more of them) and the refresh of the compute-node and cell caches (engine.ts, 5 s) by
 *   whichever step comes after they expired. Both are told by the code that sent them (the stack
 *   trace at send), and only the "all" column counts them;
 * - CPU milliseconds of the whole stack while the flow runs (this process with every thread, the
 *   DynamoDB Local JVM, children such as qemu-img), which the load moves far less than wall time.
 *
 * Absolute times drift on a noisy machine, so each flow's time is also printed as a ratio against
 * a baseline measured in the same run: a hard reboot (one machine, one driver call, no volume work).
 * Cross-cell resize, confirm and revert (bench/moves/cross-cell.ts) are set against their own
 * baseline: the driver's copy of the same root disk into cell2, timed in the same run.
 *
 *   npm run bench:moves            (BENCH_REPEATS=3 by default; the median is printed)
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { db, dynamoRequests } from '../../functions/core/db.js';
import { cinderCalls } from '../../functions/servers/cinder.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { findCopies } from '../../functions/servers/repo.js';
import { startLocalStack } from '../../infra/local/stack.js';
import { stackCpuSeconds } from '../support/cpu.js';
import { percentile } from '../support/stats.js';
import { CROSS_CELL_REFERENCE, crossCellRound, crossCellSummary, writeRootData, type FlowSample } from './cross-cell.js';
import { runBench } from '../support/run-bench.js';

const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
/** Where the image-backed server's root disk gets 1 MiB of data each (MiB offsets). */
const SCATTERED_MIB = Array.from({ length: 10 }, (_, k) => k * 100);

/** Attachments-API calls upstream makes for the flow with one volume BDM (reference §2.1 and traces vol_*). */
const REFERENCE_ATTACHMENT_CALLS: Record<string, { calls: number; source: string }> = {
  'hard reboot (baseline)': { calls: 0, source: 'no volume work' },
  'boot from image': { calls: 0, source: 'no volume' },
  'boot from volume': { calls: 3, source: 'create (conductor), update + complete (_prep_block_device)' },
  attach: { calls: 3, source: 'vol_test_01: create, update, complete' },
  detach: { calls: 1, source: 'vol_test_01: delete' },
  swap: { calls: 4, source: 'vol_test_11: create(new), update(new), complete(new), delete(old)' },
  'live migration': { calls: 4, source: 'vol_test_03: create(dest connector), get (refresh), complete, delete(old)' },
  'cold migrate': { calls: 5, source: 'vol_test_06: create(empty), delete(old), update(dest), get (refresh), complete' },
  'resize confirm': { calls: 0, source: 'vol_test_06: no Cinder calls' },
  'resize revert': { calls: 5, source: 'vol_test_07: create(empty), delete(dest), update(source), get (refresh), complete' },
  evacuate: { calls: 4, source: 'vol_test_08: create(empty), delete(old), update(dest), complete' },
  'shelve + offload': { calls: 2, source: 'vol_test_09: create(empty), delete(old)' },
  unshelve: { calls: 2, source: 'vol_test_09: update, complete' },
  delete: { calls: 1, source: 'vol_test_16: delete' },
  ...CROSS_CELL_REFERENCE,
};

type Sample = FlowSample;

/** Deep enough a stack at each request for the replicator's loop or a cache refresh to show in it. */
Error.stackTraceLimit = 60;

/**
 * Whether a request sent with this stack is none of the flow's: the replicator's scheduled pass
 * (infra/local/replicator.ts) or a refresh of engine.ts's compute-node or cell cache.
 */
function notTheFlows(stack: string): boolean {
  return /infra\/local\/replicator\.ts/.test(stack) || /at (?:async )?(?:computeNodes|cellOf) \([^)]*functions\/servers\/engine\.ts/.test(stack);
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-moves-'));
  const stack = await startLocalStack({ dataDir, port: 0, quiet: true });
  // The start's reconcile pass runs after the stack answers: ended before anything is measured.
  await stack.reconciled;
  const compute = `${stack.url}/compute/v2.1`;
  const volume = `${stack.url}/volume/v3/admin`;
  const headers = { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', Accept: 'application/json' };

  async function call(base: string, method: string, path: string, body?: unknown, version?: string): Promise<any> {
    const res = await fetch(base + path, {
      method,
      headers: { ...headers, ...(version ? { 'OpenStack-API-Version': version } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status >= 400) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  }
  const nova = (method: string, path: string, body?: unknown) => call(compute, method, path, body, 'compute 2.93');
  const cinder = (method: string, path: string, body?: unknown) => call(volume, method, path, body, 'volume 3.70');

  /**
   * DynamoDB requests made by the bench's own polling, subtracted from each flow's count. Counted
   * by the async context they are sent from: a difference of the process-wide total around a poll
   * would also take away the flow's own requests sent while the poll waited.
   */
  let pollRequests = 0;
  let otherRequests = 0;
  const polling = new AsyncLocalStorage<true>();
  db().middlewareStack.add(
    (next) => async (args) => {
      if (polling.getStore()) pollRequests++;
      else if (notTheFlows(new Error().stack ?? '')) otherRequests++;
      return next(args);
    },
    { step: 'initialize', name: 'benchPollCounter' },
  );
  /** Counts from here on: what `done()` returns is the flow's sample but its time and calls. */
  const requestCounter = () => {
    const [dynamo0, polls0, others0, cpu0] = [dynamoRequests().total, pollRequests, otherRequests, stackCpuSeconds()];
    return () => {
      const all = dynamoRequests().total - dynamo0 - (pollRequests - polls0);
      return { dynamo: all - (otherRequests - others0), dynamoAll: all, cpuMs: (stackCpuSeconds() - cpu0) * 1000 };
    };
  };
  /**
   * Polls until the server settles: every 10 ms for the first half second (a reboot's resolution),
   * then every 25 ms, at most 1/50 of a long flow's time. Each poll is 4 requests: at a fixed 10 ms
   * they were ~400/s beside a multi-second move, DynamoDB Local's whole capacity on 2 cores, which
   * slowed the move measured (not the driver's copy it is set against, timed without polling).
   */
  async function settle(id: string): Promise<Record<string, any> | undefined> {
    const t0 = performance.now();
    for (let i = 0; ; i++) {
      // Every copy (a cross-cell move has two; a revert moves its operation between them with the
      // mapping, so the mapped copy read just before the flip can look settled).
      const copies = await polling.run(true, () => findCopies(id));
      const found = copies[0];
      if (!found) return undefined;
      if (!copies.some((c) => c.instance.operation) && !found.instance.hidden) return found.instance as unknown as Record<string, any>;
      if (i > 20_000) throw new Error(`server ${id} did not settle`);
      await new Promise((r) => setTimeout(r, performance.now() - t0 < 500 ? 10 : 25));
    }
  }
  async function newVolume(): Promise<string> {
    const id = (await cinder('POST', '/volumes', { volume: { size: 1, name: 'bench' } })).volume.id as string;
    for (;;) {
      const v = (await cinder('GET', `/volumes/${id}`)).volume;
      if (v.status === 'available') return id;
      if (String(v.status).startsWith('error')) throw new Error(`volume ${id} ${v.status}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /**
   * The round's volumes, deleted once their servers are (the project's volume quota is 10, a round
   * makes 6), waited for so that no deletion runs under the next round's measurements.
   */
  async function deleteBenchVolumes(): Promise<void> {
    const mine = async () => ((await cinder('GET', '/volumes/detail')).volumes as { id: string; name: string; status: string }[]).filter((v) => v.name === 'bench');
    for (const v of await mine()) if (v.status === 'available' || v.status.startsWith('error')) await cinder('DELETE', `/volumes/${v.id}`);
    for (let i = 0; (await mine()).length > 0; i++) {
      if (i > 3000) throw new Error('bench volumes were not deleted');
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  async function boot(bootVolume?: string): Promise<string> {
    const server: Record<string, unknown> = { name: 'bench', flavorRef: '1', networks: 'auto', host: 'cmp1' };
    if (bootVolume) server.block_device_mapping_v2 = [{ boot_index: 0, uuid: bootVolume, source_type: 'volume', destination_type: 'volume' }];
    else server.imageRef = SANDBOX_IMAGES.cirrosTiny.id;
    const id = (await nova('POST', '/servers', { server })).server.id as string;
    const s = await settle(id);
    if (s?.vmState !== 'active') throw new Error(`boot ended ${JSON.stringify(s?.fault)}`);
    return id;
  }

  /** Runs `act` and measures until the server settles; `expect` checks the end state. */
  async function measure(act: () => Promise<unknown>, id: string, expectVm?: string): Promise<Sample> {
    const calls0 = cinderCalls().length;
    const counted = requestCounter();
    const t0 = performance.now();
    await act();
    const s = await settle(id);
    const ms = performance.now() - t0;
    const requests = counted();
    if (expectVm && s?.vmState !== expectVm) throw new Error(`expected ${expectVm}, got ${String(s?.vmState)} ${JSON.stringify(s?.fault)}`);
    const calls = cinderCalls().slice(calls0);
    return {
      ms,
      attachmentCalls: calls.filter((c) => c.call.startsWith('attachment_')).length,
      otherCinderCalls: calls.filter((c) => !c.call.startsWith('attachment_')).length,
      ...requests,
    };
  }
  const action = (id: string, body: unknown) => nova('POST', `/servers/${id}/action`, body);
  const forceDown = async (host: string, down: boolean) => {
    const svc = (await nova('GET', `/os-services?host=${host}&binary=nova-compute`)).services[0];
    await nova('PUT', `/os-services/${svc.id}`, { forced_down: down });
  };

  const samples = new Map<string, Sample[]>();
  const add = (name: string, s: Sample) => samples.set(name, [...(samples.get(name) ?? []), s]);

  for (let r = 0; r < REPEATS; r++) {
    // Boots (measured from POST to ACTIVE).
    const bootCalls = async (bootVolume?: string) => {
      const calls0 = cinderCalls().length;
      const counted = requestCounter();
      const t0 = performance.now();
      const id = await boot(bootVolume);
      const ms = performance.now() - t0;
      const calls = cinderCalls().slice(calls0);
      return { id, sample: { ms, attachmentCalls: calls.filter((c) => c.call.startsWith('attachment_')).length, otherCinderCalls: calls.filter((c) => !c.call.startsWith('attachment_')).length, ...counted() } };
    };
    const booted = await bootCalls();
    add('boot from image', booted.sample);
    const id = booted.id;
    // 10 MiB scattered over the 1 GiB root disk (1 MiB every 100 MiB, the last at 900 MiB): issue
    // 17's goal is a move of such a server within 0.5 s of a reboot.
    await writeRootData(id, String((await settle(id))!.host), SCATTERED_MIB);
    add('hard reboot (baseline)', await measure(() => action(id, { reboot: { type: 'HARD' } }), id, 'active'));

    const data = await newVolume();
    add('attach', await measure(() => nova('POST', `/servers/${id}/os-volume_attachments`, { volumeAttachment: { volumeId: data } }), id, 'active'));
    const other = await newVolume();
    add('swap', await measure(() => nova('PUT', `/servers/${id}/os-volume_attachments/${data}`, { volumeAttachment: { volumeId: other } }), id, 'active'));
    add('live migration', await measure(() => action(id, { 'os-migrateLive': { host: null, block_migration: 'auto' } }), id, 'active'));
    add('cold migrate', await measure(() => action(id, { migrate: null }), id, 'resized'));
    add('resize confirm', await measure(() => action(id, { confirmResize: null }), id, 'active'));
    await measure(() => action(id, { resize: { flavorRef: '2' } }), id, 'resized');
    add('resize revert', await measure(() => action(id, { revertResize: null }), id, 'active'));
    const host = String((await settle(id))!.host);
    await forceDown(host, true);
    add('evacuate', await measure(() => action(id, { evacuate: {} }), id, 'active'));
    await forceDown(host, false);
    add('shelve + offload', await measure(() => action(id, { shelve: null }), id, 'shelved_offloaded'));
    add('unshelve', await measure(() => action(id, { unshelve: null }), id, 'active'));
    add('detach', await measure(() => nova('DELETE', `/servers/${id}/os-volume_attachments/${other}`), id, 'active'));
    await nova('POST', `/servers/${id}/os-volume_attachments`, { volumeAttachment: { volumeId: other } });
    await settle(id);
    add('delete', await measure(() => nova('DELETE', `/servers/${id}`), id));

    const bootVolume = await newVolume();
    const bfv = await bootCalls(bootVolume);
    add('boot from volume', bfv.sample);
    await nova('DELETE', `/servers/${bfv.id}`);
    await settle(bfv.id);

    await crossCellRound({ boot: () => boot(), newVolume, nova, settle, measure, add });
    await deleteBenchVolumes();
  }

  const baseline = percentile(samples.get('hard reboot (baseline)')!.map((s) => s.ms), 50);
  const rows = [...samples.entries()].map(([name, ss]) => {
    const med = (f: (s: Sample) => number) => percentile(ss.map(f), 50);
    const ref = REFERENCE_ATTACHMENT_CALLS[name]!;
    return {
      flow: name,
      'wall ms (median)': med((s) => s.ms).toFixed(0),
      'x reboot': (med((s) => s.ms) / baseline).toFixed(2),
      // Issue 17's goal for a move of this server: at most 500 ms over the reboot.
      'ms over reboot': (med((s) => s.ms) - baseline).toFixed(0),
      'attachment calls': med((s) => s.attachmentCalls),
      reference: ref.calls,
      'ferry/ref': ref.calls === 0 ? (med((s) => s.attachmentCalls) === 0 ? '-' : 'n/a') : (med((s) => s.attachmentCalls) / ref.calls).toFixed(2),
      'other cinder calls': med((s) => s.otherCinderCalls),
      'dynamodb requests (own)': med((s) => s.dynamo),
      'dynamodb requests (all)': med((s) => s.dynamoAll),
      'cpu ms': med((s) => s.cpuMs).toFixed(0),
    };
  });
  console.log(`bench/moves: ${REPEATS} repetitions, medians; baseline hard reboot ${baseline.toFixed(0)} ms; load average ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  console.table(rows);
  for (const [name, ref] of Object.entries(REFERENCE_ATTACHMENT_CALLS)) console.log(`  reference ${name}: ${ref.source}`);
  for (const line of crossCellSummary((name) => (samples.has(name) ? percentile(samples.get(name)!.map((s) => s.ms), 50) : undefined))) console.log(line);
  await stack.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

runBench(main);

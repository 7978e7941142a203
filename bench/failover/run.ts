/**
 * bench/failover: fails a replicated local backend with BENCH_VOLUMES replicated volumes (default
 * 10,000) over to a target through the real volume-failover state machine on the local stack, and
 * measures wall time and DynamoDB item writes per volume (issue 17's goals for 10,000 volumes: <= 20 s, <= 1.1, within 1.5x of the floor). The baseline,
 * measured in the same run on the same volumes, is the naive loop: one volume at a time, one
 * driver failover_host call and one conditional write each, in-process (no machine, no batching).
 *
 * Seeding (not measured): volume items are written directly with BatchWriteItem (25 per request,
 * the shape POST /volumes + the create machine would leave: available, replication_status
 * enabled, on ferry@lvm-r#pool0), and each volume's backend object is made directly as the local
 * driver lays it out: a 1 GiB sparse file on the primary and on both targets (site-b, site-c).
 * Going through the API would cost ~3 requests and an execution per volume and measure creation,
 * not failover.
 *
 * The machine fails over to site-b; the baseline then fails the same volumes over to site-c one by
 * one with a driver built for the primary (the same driver work per volume: promote the target,
 * find the replica, register it) and one conditional write per volume. Failback is not run by
 * default: the local driver's failback compares every chunk of every 1 GiB volume (~3 s per volume
 * measured here), which would make a 10,000-volume run take hours; BENCH_FAILBACK=1 runs it.
 *
 *   npm run bench:failover                  (BENCH_VOLUMES=10000 by default; BENCH_BASELINE=0 skips the baseline)
 */
import { TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { db, dynamoRequests, resetDynamoRequests } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { driverFor, isReplicationDriver } from '../../functions/drivers/volume/registry.js';
import { getOperation } from '../../functions/replication/repo.js';
import { getOperation as watchOperation } from '../../functions/ops/read.js';
import { seedReplicatedVolumes } from '../../test/support/replicated-volumes.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { applyFailoverUpdate } from '../../functions/replication/volume-rules.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { getVolume, volumeUpdate } from '../../functions/volumes/repo.js';
import { MAX_TRANSACTION_ITEMS } from '../../functions/replication/steps.js';
import { FAILOVER_BATCH_SIZE } from '../../functions/replication/repo.js';
import { REPLICATED_BACKEND } from '../../functions/volumes/seed.js';
import { startLocalStack } from '../../infra/local/stack.js';
import { childrenCpuSeconds } from '../support/cpu.js';
import { runBench } from '../support/run-bench.js';

const N = Number(process.env.BENCH_VOLUMES ?? 10_000);
const RUN_FAILBACK = process.env.BENCH_FAILBACK === '1';
/** BENCH_BASELINE=0 skips the one-at-a-time baseline (minutes at 10,000 volumes), e.g. while profiling the machine. */
const RUN_BASELINE = process.env.BENCH_BASELINE !== '0';
const ADMIN = { 'X-Auth-Token': 'admin:admin', 'OpenStack-API-Version': 'volume 3.70', 'Content-Type': 'application/json' };

/**
 * DynamoDB item writes, counted from what each request carries: one for PutItem/UpdateItem/
 * DeleteItem, the request items of a BatchWriteItem, the Put/Update/Delete items of a
 * TransactWriteItems (ConditionChecks write nothing). functions/core/db.ts counts requests.
 */
let itemWrites = 0;
function countItemWrites(): void {
  db().middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, any>;
      switch ((context.commandName ?? '').replace(/Command$/, '')) {
        case 'Put':
        case 'PutItem':
        case 'Update':
        case 'UpdateItem':
        case 'Delete':
        case 'DeleteItem':
          itemWrites += 1;
          break;
        case 'BatchWrite':
        case 'BatchWriteItem':
          for (const reqs of Object.values(input.RequestItems ?? {})) itemWrites += (reqs as unknown[]).length;
          break;
        case 'TransactWrite':
        case 'TransactWriteItems':
          itemWrites += (input.TransactItems as Record<string, unknown>[]).filter((i) => i.Put || i.Update || i.Delete).length;
          break;
      }
      return next(args);
    },
    { step: 'initialize', name: 'benchItemWriteCounter' },
  );
}

/** CPU seconds spent by this process (the stack: API, interpreter, handlers, driver) and by DynamoDB Local while `fn` runs. */
async function withCpu<T>(fn: () => Promise<T>): Promise<T & { nodeCpu: number; dynamoCpu: number }> {
  const node0 = process.cpuUsage();
  const dynamo0 = childrenCpuSeconds();
  const out = await fn();
  const node = process.cpuUsage(node0);
  return { ...out, nodeCpu: (node.user + node.system) / 1e6, dynamoCpu: childrenCpuSeconds() - dynamo0 };
}

const cpuNote = (r: { nodeCpu: number; dynamoCpu: number }) => `CPU: stack ${r.nodeCpu.toFixed(1)} s, DynamoDB Local ${r.dynamoCpu.toFixed(1)} s`;

async function api(base: string, method: string, path: string, body?: unknown): Promise<number> {
  const res = await fetch(base + path, { method, headers: ADMIN, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 400) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
  return res.status;
}

async function seed(dataDir: string): Promise<string[]> {
  const t0 = performance.now();
  const { ids, roots } = await seedReplicatedVolumes(N);
  console.log(`seeded ${N} replicated volumes (items + ${N * roots.length} sparse files) in ${((performance.now() - t0) / 1000).toFixed(1)} s under ${dataDir}`);
  return ids;
}

/**
 * Polls the backend's operation as `ferry watch backend:<host>` reads it (the backends index, the
 * record, its progress counts): a few small requests. It used to list every operation of the
 * backend by a scan of the volume table, which at 10,000 volumes kept DynamoDB Local scanning
 * 20,000 items four times a second beside the failover it measured.
 */
async function waitForOperation(startedAfter: string, onPlanned: () => void): Promise<{ id: string; status: string }> {
  let planned = false;
  for (;;) {
    const view = await watchOperation(`backend:${REPLICATED_BACKEND}`).catch((e: unknown) => {
      if ((e as Error).name === 'NotFound') return undefined;
      throw e;
    });
    if (view && view.startedAt >= startedAfter && !planned && view.progress) {
      planned = true;
      onPlanned();
    }
    if (view && view.startedAt >= startedAfter && view.status !== 'running') return { id: view.id, status: view.status };
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Where a phase of the machine ended: seconds from the request, CPU seconds of the stack and of DynamoDB Local so far. */
interface PhaseMark {
  seconds: number;
  nodeCpu: number;
  dynamoCpu: number;
}

/**
 * One failover through the API and the machine: wall time from the request to the operation's end,
 * item writes per volume, and where Prepare ended (the first poll that sees the plan recorded: up
 * to one poll, 250 ms, late), so the CPU splits into the listing and the batches.
 */
async function machineFailover(base: string, backendId: string): Promise<{ seconds: number; writesPerVolume: number; requests: number; prepared?: PhaseMark }> {
  resetDynamoRequests();
  itemWrites = 0;
  const startedAt = new Date().toISOString();
  const t0 = performance.now();
  const node0 = process.cpuUsage();
  const dynamo0 = childrenCpuSeconds();
  let prepared: PhaseMark | undefined;
  await api(base, 'PUT', '/os-services/failover_host', { host: REPLICATED_BACKEND, backend_id: backendId });
  const op = await waitForOperation(startedAt, () => {
    const node = process.cpuUsage(node0);
    prepared = { seconds: (performance.now() - t0) / 1000, nodeCpu: (node.user + node.system) / 1e6, dynamoCpu: childrenCpuSeconds() - dynamo0 };
  });
  const seconds = (performance.now() - t0) / 1000;
  // The polling's own reads write nothing; its scans are subtracted from nothing: only writes are counted.
  const record = await getOperation(op.id);
  if (op.status !== 'succeeded') throw new Error(`failover ${op.id} ${op.status}: ${record?.error}`);
  return { seconds, writesPerVolume: itemWrites / N, requests: dynamoRequests().total, prepared };
}

/** The naive loop: one volume at a time, one driver call and one conditional write each, in-process. */
async function baseline(ids: string[], target: string): Promise<{ seconds: number; writesPerVolume: number }> {
  const { config } = await getBackendItem(REPLICATED_BACKEND);
  const driver = driverFor(config, '');
  if (!isReplicationDriver(driver)) throw new Error('the replicated backend has no replication driver');
  itemWrites = 0;
  const operationId = `baseline-${randomUUID()}`;
  const t0 = performance.now();
  for (const id of ids) {
    const v = (await getVolume(id))!;
    const result = await driver.failoverHost([{ volumeId: v.id, backendName: v.backendName, sizeGb: v.size }], target);
    const outcome = applyFailoverUpdate(v, result.volumeUpdates[0]?.updates, false, operationId, new Date().toISOString());
    await db().send(new TransactWriteCommand({ TransactItems: [{ Update: volumeUpdate(v, outcome.volume) }] }));
  }
  return { seconds: (performance.now() - t0) / 1000, writesPerVolume: itemWrites / ids.length };
}

/**
 * The floor: the same number of conditional writes issued straight to DynamoDB Local, shaped as the
 * machine's Batch step writes them (TransactWriteItems of MAX_TRANSACTION_ITEMS volume updates),
 * with nothing else: no machine, no driver, no reads. Measured with `inFlight` transactions at once;
 * main takes the faster of 4 at once (the shape before batches wrote their transactions side by
 * side) and the machine's own most (MaxConcurrency batches x 2), so a machine that merely keeps
 * more transactions in flight than the floor is not flattered. What the failover costs above the
 * floor is the price of the rest.
 */
async function floor(ids: string[], inFlight: number): Promise<{ seconds: number }> {
  const chunks: string[][] = [];
  for (let i = 0; i < ids.length; i += MAX_TRANSACTION_ITEMS) chunks.push(ids.slice(i, i + MAX_TRANSACTION_ITEMS));
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      for (let c = chunks[next++]; c; c = chunks[next++]) {
        await db().send(
          new TransactWriteCommand({
            TransactItems: c.map((id) => ({
              Update: {
                TableName: tableName('volume'),
                Key: volumeKey(id),
                UpdateExpression: 'SET benchFloor = :n',
                ConditionExpression: 'attribute_exists(pk)',
                ExpressionAttributeValues: { ':n': 1 },
              },
            })),
          }),
        );
      }
    }),
  );
  return { seconds: (performance.now() - t0) / 1000 };
}

/** The Map's MaxConcurrency as the ASL file sets it (what the machine ran with). */
function mapConcurrency(): number {
  const asl = JSON.parse(readFileSync(new URL('../../statemachines/volume-failover.asl.json', import.meta.url), 'utf8')) as { States: { Batches: { MaxConcurrency: number } } };
  return asl.States.Batches.MaxConcurrency;
}

async function main(): Promise<void> {
  process.env.FERRY_REPLICATION_INTERVAL_MS = String(24 * 3600 * 1000);
  const dataDir = join(tmpdir(), `ferry-bench-failover-${process.pid}`);
  mkdirSync(dataDir, { recursive: true });
  // No reconciler timer pass: one over 10,000 volumes takes about a minute of DynamoDB Local, and
  // its 300 s timer fired during the seeding or the measured failover depending on the machine's
  // load (the pass at start still runs). What is measured is the failover, against a floor with no
  // such neighbour.
  const stack = await startLocalStack({ dataDir, port: 0, quiet: true, reconcile: { intervalSeconds: 0 } });
  // The start's reconcile pass runs after the stack answers: ended before anything is measured.
  await stack.reconciled;
  try {
    countItemWrites();
    const ids = await seed(dataDir);
    const batches = Math.ceil(N / FAILOVER_BATCH_SIZE);
    const concurrency = mapConcurrency();
    console.log(`\nbench/failover: ${N} replicated volumes on ${REPLICATED_BACKEND}, ${batches} batches of ${FAILOVER_BATCH_SIZE}, Map MaxConcurrency ${concurrency}`);

    const machine = await withCpu(() => machineFailover(stack.url + '/volume/v3', 'site-b'));
    console.log(`state machine failover -> site-b: ${machine.seconds.toFixed(1)} s wall (goal for 10,000: <= 20 s), ${(N / machine.seconds).toFixed(0)} volumes/s`);
    console.log(`  DynamoDB item writes per volume: ${machine.writesPerVolume.toFixed(3)} (goal <= 1.1); DynamoDB requests (reads, writes, the bench's polling): ${machine.requests}`);
    console.log(`  ${cpuNote(machine)}`);
    const p = machine.prepared;
    if (p) {
      console.log(`  of which Prepare (request to the plan recorded, as polled): ${p.seconds.toFixed(1)} s, ${cpuNote(p)}; the batches and Finish: ${(machine.seconds - p.seconds).toFixed(1)} s, ${cpuNote({ nodeCpu: machine.nodeCpu - p.nodeCpu, dynamoCpu: machine.dynamoCpu - p.dynamoCpu })}`);
    }
    const floors: { inFlight: number; seconds: number; nodeCpu: number; dynamoCpu: number }[] = [];
    for (const inFlight of [...new Set([4, concurrency * 2])]) floors.push({ inFlight, ...(await withCpu(() => floor(ids, inFlight))) });
    const best = floors.reduce((a, b) => (b.seconds < a.seconds ? b : a));
    console.log(`  floor, the same ${N} conditional writes straight to DynamoDB (transactions of ${MAX_TRANSACTION_ITEMS}): ${floors.map((f) => `${f.inFlight} at once ${f.seconds.toFixed(1)} s (${cpuNote(f)})`).join(', ')}`);
    console.log(`  machine / floor = ${(machine.seconds / best.seconds).toFixed(2)}x against the faster (goal <= 1.5x)`);
    console.log(`  Step Functions history: about ${3 * 5 + batches * 8} events for ${batches} Map items (limit 25,000; npm run test:scale counts it from the interpreter)`);

    if (RUN_FAILBACK) {
      const back = await machineFailover(stack.url + '/volume/v3', 'default');
      console.log(`state machine failback: ${back.seconds.toFixed(1)} s wall, ${back.writesPerVolume.toFixed(3)} item writes per volume`);
    }

    if (RUN_BASELINE) {
      const base = await baseline(ids, 'site-c');
      console.log(`baseline, one volume at a time -> site-c: ${base.seconds.toFixed(1)} s wall, ${(N / base.seconds).toFixed(0)} volumes/s, ${base.writesPerVolume.toFixed(3)} item writes per volume`);
      console.log(`\nspeed-up of the state machine over the one-at-a-time baseline: ${(base.seconds / machine.seconds).toFixed(2)}x`);
    }
  } finally {
    await stack.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runBench(main);

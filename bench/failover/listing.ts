/**
 * bench/failover/listing: where the failover's Prepare spends DynamoDB Local's CPU, measured apart
 * from the machine (docs/failover-at-scale.md, "Prepare: the listing written as one string").
 * BENCH_VOLUMES replicated volume items and their claims (default 3,000: 6,000 items; no backend
 * files) are written straight to DynamoDB Local, then each variant (BENCH_VARIANTS, comma-separated,
 * default all) runs BENCH_REPEATS times interleaved, printing wall time and the CPU seconds of
 * DynamoDB Local and of this process, and each against the round's first variant (its baseline: with
 * the default order, the listing as it is):
 *
 * - `listing`: repo.ts listFailoverVolumesOnBackend as it is; `s1`, `s2`, `s4`, `s8`, `s16`: the
 *   same scan with that many segments; `noproj`: 4 segments without the projection;
 * - `writes`: the bench's floor (transactions of 100 conditional updates, 4 at once);
 *   `writes+listing`: the same with the listing beside it (does DynamoDB Local scan for free?);
 * - `plan-maps` / `plan-json`: the batch items of 198 volumes written (BatchWriteItem, 25 a request)
 *   as lists of maps or as one JSON string each; `read-maps` / `read-json`: read back, one GetItem each.
 *
 *   npm run bench:failover:listing
 */
import { BatchWriteCommand, GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { db, scanAll } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { FAILOVER_BATCH_SIZE, listFailoverVolumesOnBackend, type FailoverVolumeState } from '../../functions/replication/repo.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { claimItem } from '../../functions/volumes/repo.js';
import { REPLICATED_BACKEND } from '../../functions/volumes/seed.js';
import { startLocalStack } from '../../infra/local/stack.js';
import { putVolumeItems, replicatedVolumeItem } from '../../test/support/replicated-volumes.js';
import { childrenCpuSeconds } from '../support/cpu.js';
import { runBench } from '../support/run-bench.js';

const N = Number(process.env.BENCH_VOLUMES ?? 3_000);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
/** What repo.ts's listing projects (LISTED_ATTRIBUTES there). */
const LISTED = ['id', 'version', 'host', 'status', 'replicationStatus', 'backendName', 'size', 'failoverOperationId', 'snapshotIds'];

let ids: string[] = [];
let listed: FailoverVolumeState[] = [];

/** The listing's scan with `segments` segments, with or without its projection; answers the volumes found. */
async function scan(segments: number, projection = true): Promise<number> {
  const names: Record<string, string> = projection ? Object.fromEntries(LISTED.map((a) => [`#${a}`, a])) : { '#host': 'host' };
  const found = await Promise.all(
    Array.from({ length: segments }, (_, segment) =>
      scanAll({
        TableName: tableName('volume'),
        Segment: segment,
        TotalSegments: segments,
        ...(projection ? { ProjectionExpression: Object.keys(names).join(', ') } : {}),
        FilterExpression: 'sk = :vol AND begins_with(#host, :prefix)',
        ExpressionAttributeNames: names,
        ExpressionAttributeValues: { ':vol': 'VOL', ':prefix': `${REPLICATED_BACKEND}#` },
        ConsistentRead: true,
      }),
    ),
  );
  return found.flat().length;
}

/** The floor's writes: every volume updated once, in transactions of 100, 4 at once. */
async function writes(): Promise<number> {
  const chunks: string[][] = [];
  for (let i = 0; i < ids.length; i += 100) chunks.push(ids.slice(i, i + 100));
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      for (let c = chunks[next++]; c; c = chunks[next++]) {
        const TransactItems = c.map((id) => ({ Update: { TableName: tableName('volume'), Key: volumeKey(id), UpdateExpression: 'ADD benchListing :n', ConditionExpression: 'attribute_exists(pk)', ExpressionAttributeValues: { ':n': 1 } } }));
        await db().send(new TransactWriteCommand({ TransactItems }));
      }
    }),
  );
  return ids.length;
}

const batches = (): FailoverVolumeState[][] => Array.from({ length: Math.ceil(listed.length / FAILOVER_BATCH_SIZE) }, (_, n) => listed.slice(n * FAILOVER_BATCH_SIZE, (n + 1) * FAILOVER_BATCH_SIZE));
const batchKey = (form: string, n: number) => ({ pk: `REPLOP#bench-listing-${form}`, sk: `BATCH#${String(n).padStart(5, '0')}` });

/** The plan's batch items written as lists of maps or as JSON strings, 25 per BatchWriteItem; answers the items written. */
async function writePlan(form: 'maps' | 'json'): Promise<number> {
  const items = batches().map((volumes, n) => ({ PutRequest: { Item: { ...batchKey(form, n), ...(form === 'maps' ? { volumes } : { listing: JSON.stringify(volumes) }) } } }));
  for (let i = 0; i < items.length; i += 25) await db().send(new BatchWriteCommand({ RequestItems: { [tableName('volume')]: items.slice(i, i + 25) } }));
  return items.length;
}

/** Every batch item read back, one consistent GetItem each, side by side; answers the volumes read. */
async function readPlan(form: 'maps' | 'json'): Promise<number> {
  const counts = await Promise.all(
    batches().map(async (_, n) => {
      const { Item } = await db().send(new GetCommand({ TableName: tableName('volume'), Key: batchKey(form, n), ConsistentRead: true }));
      return form === 'maps' ? (Item!.volumes as unknown[]).length : (JSON.parse(Item!.listing as string) as unknown[]).length;
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

const VARIANTS: Record<string, [string, () => Promise<number>]> = {
  listing: ['listFailoverVolumesOnBackend as it is', async () => (await listFailoverVolumesOnBackend(REPLICATED_BACKEND)).length],
  ...Object.fromEntries([1, 2, 4, 8, 16].map((s) => [`s${s}`, [`${s} segment(s), projection`, () => scan(s)]])),
  noproj: ['4 segments, no projection', () => scan(4, false)],
  writes: ['the floor\'s writes, 4 at once', writes],
  'writes+listing': ['the floor\'s writes + the listing beside', async () => (await Promise.all([writes(), listFailoverVolumesOnBackend(REPLICATED_BACKEND)]))[1].length],
  'plan-maps': ['plan written, lists of maps', () => writePlan('maps')],
  'plan-json': ['plan written, JSON strings', () => writePlan('json')],
  'read-maps': ['plan read, lists of maps', () => readPlan('maps')],
  'read-json': ['plan read, JSON strings', () => readPlan('json')],
};

/** One variant's wall and DynamoDB Local CPU seconds; the line says both against the round's first variant (the baseline). */
async function measure(label: string, fn: () => Promise<number>, baseline?: { seconds: number; dynamoCpu: number }): Promise<{ seconds: number; dynamoCpu: number }> {
  const dynamo0 = childrenCpuSeconds();
  const node0 = process.cpuUsage();
  const t0 = performance.now();
  const count = await fn();
  const seconds = (performance.now() - t0) / 1000;
  const dynamoCpu = childrenCpuSeconds() - dynamo0;
  const node = process.cpuUsage(node0);
  const against = baseline ? `; ${(seconds / baseline.seconds).toFixed(2)}x the first's wall, ${(dynamoCpu / baseline.dynamoCpu).toFixed(2)}x its DynamoDB Local CPU` : ' (the baseline of the round)';
  console.log(`${label.padEnd(42)} ${seconds.toFixed(2)} s, CPU: DynamoDB Local ${dynamoCpu.toFixed(2)} s, this process ${((node.user + node.system) / 1e6).toFixed(2)} s (${count})${against}`);
  return { seconds, dynamoCpu };
}

async function main(): Promise<void> {
  const chosen = (process.env.BENCH_VARIANTS ?? Object.keys(VARIANTS).join(',')).split(',').map((v) => {
    if (!VARIANTS[v]) throw new Error(`BENCH_VARIANTS: unknown variant ${v} (one of ${Object.keys(VARIANTS).join(', ')})`);
    return VARIANTS[v];
  });
  const dataDir = join(tmpdir(), `ferry-bench-listing-${process.pid}`);
  mkdirSync(dataDir, { recursive: true });
  const stack = await startLocalStack({ dataDir, port: 0, quiet: true, reconcile: { intervalSeconds: 0 } });
  await stack.reconciled;
  try {
    const { config } = await getBackendItem(REPLICATED_BACKEND);
    const at = new Date().toISOString();
    const on = { host: `${REPLICATED_BACKEND}#pool0`, serviceUuid: config.serviceUuid, availabilityZone: 'nova', typeId: 'bench', typeName: 'replicated', at };
    const items = Array.from({ length: N }, () => replicatedVolumeItem(randomUUID(), on));
    ids = items.map((v) => v.id);
    const t0 = performance.now();
    await putVolumeItems(items.flatMap((v) => [v, claimItem(v, on.host).Put!.Item!]));
    listed = await listFailoverVolumesOnBackend(REPLICATED_BACKEND);
    console.log(`bench/failover/listing: ${N} volumes and their claims written in ${((performance.now() - t0) / 1000).toFixed(1)} s; load ${loadavg()[0]!.toFixed(1)}`);
    for (let r = 0; r < REPEATS; r++) {
      let baseline: { seconds: number; dynamoCpu: number } | undefined;
      for (const [label, fn] of chosen) {
        const measured = await measure(label, fn, baseline);
        baseline ??= measured;
      }
      console.log('');
    }
  } finally {
    await stack.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

runBench(main);

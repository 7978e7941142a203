/**
 * Failover of a fleet of replicated EBS volumes through the volume-failover machine, EC2 mocked per
 * region: every volume gets exactly one CreateVolume (a ClientToken of its own), the Describe calls
 * are shared by each batch of 200, a batch that fails half-way and runs again makes no second
 * volume, and every volume ends failed-over pointing at its new EBS volume.
 *
 * FERRY_EBS_FAILOVER_VOLUMES sets the fleet: 10,000 by default and with `npm run test:scale` (about
 * a minute here), 1,000 in `npm test` (which keeps its 20 minutes). The execution's history, as AWS
 * would count it (infra/local/history-count.ts), stays far under AWS's limit of 25,000 events.
 * Seeding writes the volume items straight to DynamoDB and the arrived copies straight into the
 * target region's fake, as bench/failover does: what is measured is the failover, not the setup.
 */
import { CreateVolumeCommand } from '@aws-sdk/client-ec2';
import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { db } from '../../functions/core/db.js';
import { getBackendItem } from '../../functions/replication/service-repo.js';
import { defaultBackendName } from '../../functions/volumes/model.js';
import { getVolume } from '../../functions/volumes/repo.js';
import { getVolumeTypeByName } from '../../functions/volumes/types.js';
import { AWS_HISTORY_LIMIT } from '../../infra/local/history-count.js';
import { awsError, type FakeEc2 } from '../support/fake-ec2.js';
import { startReplicatedEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';
import { putVolumeItems, replicatedVolumeItem } from '../support/replicated-volumes.js';
import { listOperations } from '../support/replication-operations.js';

const N = Number(process.env.FERRY_EBS_FAILOVER_VOLUMES ?? 10_000);
const HOST = 'ferry@ebs-r';
let ebs: EbsStack;
let frankfurt: FakeEc2;
let ids: string[];

async function seed(): Promise<string[]> {
  const { config } = await getBackendItem(HOST);
  const type = await getVolumeTypeByName('ebs-replicated');
  const at = new Date().toISOString();
  const out = Array.from({ length: N }, () => randomUUID());
  await putVolumeItems(out.map((id) => replicatedVolumeItem(id, { host: `${HOST}#gp`, serviceUuid: config.serviceUuid, availabilityZone: 'eu-west-1a', typeId: type.id, typeName: type.name, at })));
  // The copy each volume's replication left in Frankfurt.
  for (const [n, id] of out.entries()) {
    const name = defaultBackendName(id);
    frankfurt.snapshots.set(`snap-arrived-${n}`, {
      SnapshotId: `snap-arrived-${n}`,
      VolumeSize: 1,
      State: 'completed',
      StartTime: new Date(at),
      Tags: [
        { Key: 'ferry:backend', Value: HOST },
        { Key: 'ferry:replica-of', Value: name },
        { Key: 'ferry:replication', Value: 'copy' },
        { Key: 'ferry:source-time', Value: at },
        { Key: 'ferry:pool', Value: 'gp' },
      ],
    });
  }
  return out;
}

beforeAll(async () => {
  ebs = await startReplicatedEbsStack({ host: HOST, volumeBackendName: 'ebs-r', typeName: 'ebs-replicated', poolCapacityGb: 100_000 });
  frankfurt = ebs.fakes.get('eu-central-1')!;
  frankfurt.pageSize = 1000;
  ids = await seed();
}, 600_000);
afterAll(async () => {
  await ebs?.stop();
});

describe(`failover of ${N} replicated EBS volumes through the machine (EC2 mocked)`, () => {
  test('one CreateVolume per volume, a batch that failed half-way makes none twice, every volume failed over', async () => {
    // The 7th CreateVolume of the run fails once after EC2 made the volume (a lost reply): its batch runs again.
    let creates = 0;
    const create = frankfurt.createVolume.bind(frankfurt);
    frankfurt.createVolume = (input) => {
      const made = create(input);
      if (++creates === 7) throw awsError('RequestTimeout', 'the reply was lost');
      return made;
    };
    ebs.ec2.resetHistory();

    const started = await ebs.api('PUT', '/os-services/failover_host', { host: HOST, backend_id: 'frankfurt' });
    expect(started.status).toBe(202);
    const op = await eventually(async (note) => {
      const [last] = await listOperations(HOST);
      return ['succeeded', 'failed'].includes(note(last?.status ?? 'none')) ? last : undefined;
    }, 'the failover to end', { timeoutMs: 900_000, intervalMs: 500 });

    expect(op!.status).toBe('succeeded');
    const calls = ebs.ec2.calls().map((c) => (c.args[0] as object).constructor.name.replace(/Command$/, ''));
    const tokens = ebs.ec2.commandCalls(CreateVolumeCommand).map((c) => c.args[0].input.ClientToken);
    // Every volume one volume in Frankfurt; the repeated CreateVolume was answered by its token.
    expect(frankfurt.volumes.size).toBe(N);
    expect(new Set(tokens).size).toBe(N);
    expect(tokens.length).toBeLessThanOrEqual(N + 200);
    // Requests per volume: its CreateVolume plus a share of the batch's two Describe calls (and a retried batch's).
    expect(calls.length / N).toBeLessThan(1.05);
    const sample = await Promise.all([ids[0]!, ids[N >> 1]!, ids[N - 1]!].map((id) => getVolume(id)));
    for (const v of sample) {
      expect(v!.replicationStatus).toBe('failed-over');
      expect(frankfurt.volumes.get(v!.providerLocation!)?.Tags).toEqual(expect.arrayContaining([{ Key: 'ferry:backend-name', Value: v!.backendName }]));
    }
    // The history AWS would keep for the execution, counted from the interpreter's event log.
    const history = await eventually(async (note) => {
      const dir = join(ebs.stack.dataDir, 'stepfunctions', 'executions');
      const files = (await readdir(dir)).filter((f) => f.startsWith('volume-failover@'));
      const records = await Promise.all(files.map(async (f) => JSON.parse(await readFile(join(dir, f), 'utf8')) as { status: string; historyEvents?: number }));
      note(records.map((r) => r.status).join(','));
      return records.length === 1 && records[0]!.status === 'SUCCEEDED' ? records[0]!.historyEvents : undefined;
    }, 'the failover execution to be recorded');
    expect(history).toBeGreaterThan(N / 200);
    expect(history).toBeLessThan(AWS_HISTORY_LIMIT / 10);
    console.log(`failover of ${N} EBS volumes: ${calls.length} EC2 requests (${(calls.length / N).toFixed(3)} per volume), ${tokens.length} CreateVolume, ${history} history events (AWS limit ${AWS_HISTORY_LIMIT})`);
  }, 900_000);
});

/**
 * Availability zones where every volume backend is an EBS one (as on AWS, inventories/aws-sandbox.yaml):
 * no backend is in upstream's default zone `nova`, so a volume created without a zone (`cinder
 * create 1`, what docs/aws.md and the smoke test run) is placed by the scheduler in any zone its
 * type allows and takes that zone; a zone that exists nowhere is refused as upstream refuses it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startEbsStack, type EbsStack } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';

let ebs: EbsStack;
const volume = async (id: string) => (await ebs.api('GET', `/volumes/${id}`)).body.volume as Record<string, any>;
async function created(body: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await ebs.api('POST', '/volumes', { volume: { size: 1, ...body } });
  expect(res.status).toBe(202);
  const id = res.body.volume.id as string;
  await eventually(async (note) => ['available', 'error'].includes(note((await volume(id)).status)) || undefined, `volume ${id} settled`);
  return volume(id);
}

beforeAll(async () => {
  ebs = await startEbsStack({
    onlyThese: true,
    backends: [
      { host: 'ferry@ebs-a', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', volumeBackendName: 'ebs-a', pools: [{ name: 'gp3', totalCapacityGb: 100 }] },
      { host: 'ferry@ebs-b', driver: 'aws-ebs', availabilityZone: 'eu-west-1b', volumeBackendName: 'ebs-b', pools: [{ name: 'gp3', totalCapacityGb: 100 }] },
    ],
    types: [{ name: 'zone-b', extraSpecs: { volume_backend_name: 'ebs-b' } }],
  });
}, 120_000);
afterAll(async () => {
  await ebs?.stop();
});

describe('volumes without a zone on a deployment with no `nova` zone', () => {
  test('the scheduler chooses the zone and the volume takes its backend\'s', async () => {
    const v = await created({});
    expect(v.status).toBe('available');
    expect(['eu-west-1a', 'eu-west-1b']).toContain(v.availability_zone);
    expect(v['os-vol-host-attr:host']).toMatch(v.availability_zone === 'eu-west-1a' ? /^ferry@ebs-a#/ : /^ferry@ebs-b#/);
  });

  test('a type pinned to one backend lands in that backend\'s zone', async () => {
    const v = await created({ volume_type: 'zone-b' });
    expect([v.status, v.availability_zone]).toEqual(['available', 'eu-west-1b']);
  });

  test('a zone asked for is kept to; one that exists nowhere is refused with upstream\'s message', async () => {
    expect(await created({ availability_zone: 'eu-west-1a' })).toMatchObject({ status: 'available', availability_zone: 'eu-west-1a' });
    const nova = await ebs.api('POST', '/volumes', { volume: { size: 1, availability_zone: 'nova' } });
    expect([nova.status, nova.body.badRequest?.message]).toEqual([400, "Availability zone 'nova' is invalid."]);
  });
});

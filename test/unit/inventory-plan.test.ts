/**
 * The inventory's pure parts: the plan of an apply (what is added, changed, removed, refused) and
 * the document's validation.
 */
import { describe, expect, test } from 'vitest';
import { planInventory, type Kind, type LiveView, type View } from '../../functions/inventory/plan.js';
import { parseInventory, resolveRoots } from '../../functions/inventory/schema.js';

const view = (entries: Record<string, string>): View => new Map(Object.entries(entries));
const live = (entries: Record<string, { fields: string; inUse?: string }>): LiveView => new Map(Object.entries(entries));
const kinds = <T>(m: Partial<Record<Kind, T>>) => new Map(Object.entries(m) as [Kind, T][]);

describe('planInventory', () => {
  test('adds what is missing, keeps what is equal, changes what differs where the kind allows it', () => {
    const plan = planInventory(
      kinds({ 'volume backend': view({ a: '1', b: '2', c: '3' }), flavor: view({ f1: 'x' }) }),
      kinds({ 'volume backend': live({ b: { fields: '2' }, c: { fields: 'old' } }), flavor: live({ f1: { fields: 'y' } }) }),
      kinds({}),
    );
    expect(plan.changes).toEqual([
      { kind: 'volume backend', key: 'a', action: 'add' },
      { kind: 'volume backend', key: 'c', action: 'update' },
    ]);
    expect(plan.unchanged).toBe(1);
    expect(plan.refusals).toEqual([{ kind: 'flavor', key: 'f1', reason: expect.stringContaining('immutable') }]);
  });

  test('removes only what the last applied inventory named, and refuses what is in use', () => {
    const plan = planInventory(
      kinds({ 'volume type': view({}) }),
      kinds({ 'volume type': live({ managed: { fields: '1' }, busy: { fields: '1', inUse: '2 volume(s)' }, byApi: { fields: '1' } }) }),
      kinds({ 'volume type': new Set(['managed', 'busy', 'gone-already']) }),
    );
    expect(plan.changes).toEqual([{ kind: 'volume type', key: 'managed', action: 'remove' }]);
    expect(plan.refusals).toEqual([{ kind: 'volume type', key: 'busy', reason: 'in use: 2 volume(s)' }]);
  });

  test('removals come after adds, in reverse kind order (hosts before cells, types before backends)', () => {
    const plan = planInventory(
      kinds({ 'volume backend': view({ new: '1' }) }),
      kinds({ 'volume backend': live({ old: { fields: '1' } }), 'volume type': live({ t: { fields: '1' } }), 'compute host': live({ h: { fields: '1' } }) }),
      kinds({ 'volume backend': new Set(['old']), 'volume type': new Set(['t']), 'compute host': new Set(['h']) }),
    );
    expect(plan.changes.map((c) => `${c.action} ${c.kind} ${c.key}`)).toEqual(['add volume backend new', 'remove compute host h', 'remove volume type t', 'remove volume backend old']);
  });

  test('kinds that cannot be removed are refused, not removed', () => {
    const plan = planInventory(kinds({}), kinds({ cell: live({ cell9: { fields: '1' } }) }), kinds({ cell: new Set(['cell9']) }));
    expect(plan.changes).toEqual([]);
    expect(plan.refusals[0]).toMatchObject({ kind: 'cell', key: 'cell9' });
  });
});

describe('parseInventory', () => {
  test('an empty document is an empty inventory', () => {
    expect(parseInventory({}, 'local').volumeBackends).toEqual([]);
  });

  test('unknown fields and wrong shapes are named with their path', () => {
    expect(() => parseInventory({ volumeBackends: [{ host: 'a@b', driver: 'local', root: 'r', volumeBackendName: 'b', pools: [{ name: 'p', totalCapacityGb: 1 }], colour: 'red' }] }, 'local')).toThrow(/volumeBackends\.0: Unrecognized key: "colour"/);
    expect(() => parseInventory({ cells: [{ name: 'c', table: 'cell7', generation: 1 }] }, 'local')).toThrow(/cells\.0\.table/);
  });

  test('on AWS a share root must be on the share storage', () => {
    const doc = { shareBackends: [{ host: 'a@b', driver: 'local-a', root: '/tmp/x', shareBackendName: 'b', protocols: ['NFS'], pools: [{ name: 'p', totalCapacityGb: 1 }] }] };
    expect(() => parseInventory(doc, 'aws')).toThrow(/root must be under \/mnt\/ferry-shares/);
    expect(parseInventory(doc, 'local').shareBackends).toHaveLength(1);
  });

  test('relative roots resolve under the data directory, absolute ones stay', () => {
    const inv = parseInventory({ shareBackends: [{ host: 'a@b', driver: 'local-a', root: 'shares/b', shareBackendName: 'b', protocols: ['NFS'], pools: [{ name: 'p', totalCapacityGb: 1 }] }, { host: 'a@c', driver: 'local-b', root: '/srv/c', shareBackendName: 'c', protocols: ['NFS'], pools: [{ name: 'p', totalCapacityGb: 1 }] }] }, 'local');
    expect(resolveRoots(inv, '/data').shareBackends.map((b) => ('root' in b ? b.root : b.driver))).toEqual(['/data/shares/b', '/srv/c']);
  });

  const efs = (over: Record<string, unknown> = {}) => ({
    host: 'ferry@efs-a',
    driver: 'aws-efs',
    region: 'eu-west-1',
    vpcId: 'vpc-0abc',
    subnetIds: ['subnet-0a1', 'subnet-0b2'],
    shareBackendName: 'efs-a',
    pools: [{ name: 'p', totalCapacityGb: 10 }],
    ...over,
  });

  test('an aws-efs share backend: no root, NFS by default, valid on AWS and locally, left alone by resolveRoots', () => {
    for (const target of ['aws', 'local'] as const) {
      const [b] = parseInventory({ shareBackends: [efs({ performanceMode: 'generalPurpose', throughputMode: 'bursting' })] }, target).shareBackends;
      expect(b).toEqual({ ...efs(), protocols: ['NFS'], performanceMode: 'generalPurpose', throughputMode: 'bursting' });
    }
    const inv = parseInventory({ shareBackends: [efs()] }, 'local');
    expect(resolveRoots(inv, '/data').shareBackends).toEqual(inv.shareBackends);
  });

  test('an aws-efs share backend is checked as its driver checks it: every problem named, with the host', () => {
    expect(() => parseInventory({ shareBackends: [efs({ vpcId: 'my-vpc', subnetIds: ['subnet-0a1', 'subnet-0a1'], performanceMode: 'maxIO' })] }, 'aws')).toThrow(
      /share backend ferry@efs-a \(aws-efs\): vpcId must be a VPC id \(vpc-\.\.\.\), not "my-vpc"; subnetIds names a subnet twice; performanceMode maxIO cannot go with elastic throughput/,
    );
    expect(() => parseInventory({ shareBackends: [efs({ protocols: ['CIFS'] })] }, 'aws')).toThrow(/shareBackends\.0\.protocols\.0/);
    expect(() => parseInventory({ shareBackends: [efs({ root: '/mnt/ferry-shares/x' })] }, 'aws')).toThrow(/Unrecognized key: "root"/);
    expect(() => parseInventory({ shareBackends: [efs({ subnetIds: [] })] }, 'aws')).toThrow(/shareBackends\.0\.subnetIds/);
  });
});

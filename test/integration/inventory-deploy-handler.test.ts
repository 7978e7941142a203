/**
 * The custom resource behind `cdk deploy -c inventory=FILE` (functions/inventory/deploy.ts), called
 * as CloudFormation's Provider framework calls it, against DynamoDB Local under the AWS rules: Create
 * applies the document; an Update applies the new document's plan; an Update that would remove a
 * backend holding capacity fails with the plan in its reason and writes nothing (CloudFormation then
 * rolls the stack back); Delete keeps the physical id and touches no data.
 */
import { TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { resolve } from 'node:path';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { db } from '../../functions/core/db.js';
import { lastApplied } from '../../functions/inventory/apply.js';
import { INVENTORY_PROPERTY, handler } from '../../functions/inventory/deploy.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { listVolumeTypes } from '../../functions/volumes/types.js';
import { listBackends } from '../../functions/volumes/backends.js';
import { reservePoolItem } from '../../functions/volumes/scheduler.js';
import { REPO_ROOT } from '../../infra/aws/ferry-stack.js';
import { readInventoryFile } from '../../infra/inventory-file.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

const example = () => structuredClone(readInventoryFile(resolve(REPO_ROOT, 'inventories/aws-sandbox.yaml'))) as Inventory;
/** The example without the zone-b backend and its type. */
const withoutZoneB = () => {
  const inv = example();
  inv.volumeBackends = inv.volumeBackends.filter((b) => b.host !== 'ferry@ebs-b');
  inv.volumeTypes = inv.volumeTypes.filter((t) => t.name !== 'zone-b');
  return inv;
};

const base = {
  ServiceToken: 'arn:aws:lambda:eu-west-1:123456789012:function:Ferry-InventoryProviderframeworkonEvent',
  ResponseURL: 'https://cloudformation-custom-resource-response-euwest1.s3.amazonaws.com/x',
  StackId: 'arn:aws:cloudformation:eu-west-1:123456789012:stack/Ferry/1',
  RequestId: 'request-1',
  LogicalResourceId: 'Inventory',
  ResourceType: 'Custom::FerryInventory',
};
const properties = (inv: Inventory) => ({ ServiceToken: base.ServiceToken, [INVENTORY_PROPERTY]: JSON.stringify(inv) });
const create = (inv: Inventory): CloudFormationCustomResourceEvent => ({ ...base, RequestType: 'Create', ResourceProperties: properties(inv) });
const update = (inv: Inventory, old: Inventory): CloudFormationCustomResourceEvent => ({
  ...base,
  RequestType: 'Update',
  PhysicalResourceId: 'ferry-inventory',
  ResourceProperties: properties(inv),
  OldResourceProperties: properties(old),
});
const hosts = async () => (await listBackends()).map((b) => b.host).sort();

let dynamo: LocalDynamo;
beforeAll(async () => {
  dynamo = await useLocalDynamo();
}, 120_000);
afterAll(async () => dynamo?.stop());

describe('the inventory custom resource', () => {
  test('Create applies the document: its backends and types are there, the changes counted', async () => {
    const result = await handler(create(example()));

    expect(result.PhysicalResourceId).toBe('ferry-inventory');
    expect(Number(result.Data?.Changes)).toBeGreaterThan(0);
    expect(await hosts()).toEqual(example().volumeBackends.map((b) => b.host).sort());
    expect((await listVolumeTypes()).map((t) => t.name)).toContain('zone-b');
  });

  test('an Update with the same document changes nothing', async () => {
    const result = await handler(update(example(), example()));

    expect(result).toEqual({ PhysicalResourceId: 'ferry-inventory', Data: { Changes: '0' } });
  });

  test("an Update applies the new document's plan: the backend and type it no longer names are removed", async () => {
    const result = await handler(update(withoutZoneB(), example()));

    expect(result.Data?.Changes).toBe('2');
    expect(await hosts()).not.toContain('ferry@ebs-b');
    expect((await listVolumeTypes()).map((t) => t.name)).not.toContain('zone-b');
  });

  test('an Update that removes a backend in use fails the deploy with the plan as its reason, and writes nothing', async () => {
    // Capacity allocated on ferry@ebs-a's pool, as a volume's create reserves it.
    await db().send(new TransactWriteCommand({ TransactItems: [reservePoolItem('ferry@ebs-a#gp3', 1, 500)] }));
    const noZoneA = withoutZoneB();
    noZoneA.volumeBackends = noZoneA.volumeBackends.filter((b) => b.host !== 'ferry@ebs-a');
    const before = await lastApplied();

    const refused = handler(update(noZoneA, withoutZoneB()));

    await expect(refused).rejects.toThrow(/^inventory not applied: .*! volume backend ferry@ebs-a: refused, in use: holds 0 volume\(s\), 1 GiB allocated/);
    expect(await hosts()).toContain('ferry@ebs-a');
    expect((await lastApplied())?.version).toBe(before?.version);
  });

  test('Delete answers with the physical id it was given and leaves the data', async () => {
    const result = await handler({ ...base, RequestType: 'Delete', PhysicalResourceId: 'ferry-inventory', ResourceProperties: properties(withoutZoneB()) });

    expect(result).toEqual({ PhysicalResourceId: 'ferry-inventory' });
    expect(await hosts()).toContain('ferry@ebs-a');
  });
});

/**
 * The local share drivers' size (functions/drivers/share/local.ts, local-size.ts): a quota recorded
 * beside the directory at create, raised by extend, lowered by shrink unless the directory holds
 * more (ShareShrinkingPossibleDataLoss, nothing changed), put back by restoreShareSize with no such
 * check, and the usage reported.
 */
import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import { ShareShrinkingPossibleDataLoss } from '../../functions/drivers/share/driver.js';
import { GIB } from '../../functions/drivers/share/local-size.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';

const NAME = 'share-22222222-2222-4222-a222-222222222222';
let root: string;
let driver: LocalShareDriver;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'ferry-size-'));
  driver = new LocalShareDriver({ host: 'ferry@t', driver: 'local-a', root, pools: [{ name: 'pool0', totalCapacityGb: 100 }], shareBackendName: 't', protocols: ['NFS'] });
  await driver.createShare({ name: NAME, sizeGb: 2, proto: 'NFS', pool: 'pool0' });
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('local share size', () => {
  test('create records the size; extend raises it (again: no change); smaller is refused', async () => {
    expect(await driver.shareUsage(NAME)).toEqual({ name: NAME, sizeGb: 2, usedBytes: 0, overQuota: false, writesBlocked: false });
    await driver.extendShare(NAME, 4);
    await driver.extendShare(NAME, 4);
    expect((await driver.shareUsage(NAME))?.sizeGb).toBe(4);
    await expect(driver.extendShare(NAME, 3)).rejects.toBeInstanceOf(DriverError);
    // A retried create keeps the extended size.
    await driver.createShare({ name: NAME, sizeGb: 2, proto: 'NFS', pool: 'pool0' });
    expect((await driver.shareUsage(NAME))?.sizeGb).toBe(4);
  });

  test('shrink below what the directory holds is ShareShrinkingPossibleDataLoss and changes nothing; above it, the size is lowered', async () => {
    // Prepare: a sparse file of 1.5 GiB (its apparent size is what counts, as EFS meters).
    await writeFile(join(root, NAME, 'data'), '');
    await truncate(join(root, NAME, 'data'), Math.floor(1.5 * GIB));
    await driver.extendShare(NAME, 3);
    // Act / Assess
    const refused = await driver.shrinkShare(NAME, 1).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ShareShrinkingPossibleDataLoss);
    expect((await driver.shareUsage(NAME))?.sizeGb).toBe(3);
    await driver.shrinkShare(NAME, 2);
    expect(await driver.shareUsage(NAME)).toMatchObject({ sizeGb: 2, usedBytes: Math.floor(1.5 * GIB), overQuota: false });
    await expect(driver.shrinkShare(NAME, 5)).rejects.toBeInstanceOf(DriverError);
  });

  test('restoreShareSize (the undo of a failed resize) puts the size back below what the directory holds: no data-loss check, the share reported over its size', async () => {
    await writeFile(join(root, NAME, 'data'), '');
    await truncate(join(root, NAME, 'data'), Math.floor(1.5 * GIB));
    await driver.extendShare(NAME, 3);
    await driver.restoreShareSize(NAME, 1);
    await driver.restoreShareSize(NAME, 1);
    expect(await driver.shareUsage(NAME)).toMatchObject({ sizeGb: 1, overQuota: true });
    await expect(driver.restoreShareSize(NAME, 0)).rejects.toBeInstanceOf(DriverError);
    await expect(driver.restoreShareSize('share-33333333-3333-4333-a333-333333333333', 1)).rejects.toBeInstanceOf(DriverError);
  });

  test('a share not there: extend and shrink fail, usage is undefined; delete removes the record', async () => {
    const other = 'share-33333333-3333-4333-a333-333333333333';
    await expect(driver.extendShare(other, 2)).rejects.toBeInstanceOf(DriverError);
    await expect(driver.shrinkShare(other, 1)).rejects.toBeInstanceOf(DriverError);
    expect(await driver.shareUsage(other)).toBeUndefined();
    await driver.deleteShare(NAME);
    await driver.createShare({ name: NAME, sizeGb: 1, proto: 'NFS', pool: 'pool0' });
    expect((await driver.shareUsage(NAME))?.sizeGb).toBe(1);
  });
});

/**
 * Driver-assisted share migration by the local share driver (kind local-a), on real directories:
 * what it refuses (complete before phase 1 is done, another kind, a destination holding data,
 * another migration's state, a missing source) and cancel (destination and state gone, source
 * intact, idempotent). The copy itself: share-driver-migration-copy.test.ts.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import { LocalShareDriver } from '../../functions/drivers/share/local.js';
import { DST, cfg, request, root, a, b, srcDir, dstDir, statePath, useShareMigrationDirs, buildSourceShare, snapshot, differences, readStateFile, continueToEnd } from '../support/share-migration-tree.js';

useShareMigrationDirs();

describe('local share driver: driver-assisted migration, refusals and cancel', () => {
  test('complete refuses before phase 1 is done', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const req = request(b);
    await driver.migrationStart(req);
    await expect(driver.migrationComplete(req)).rejects.toThrow(/phase 1/);
    expect(await driver.migrationContinue(req)).toBe(false);
    await expect(driver.migrationComplete(req)).rejects.toThrow(/phase 1/);
    // Refusing changed nothing: the source is whole, the migration goes on.
    expect(existsSync(join(srcDir, 'big.bin'))).toBe(true);
    expect(readStateFile().status).toBe('copying');
    await continueToEnd(driver, req);
    expect(await driver.migrationComplete(req)).toEqual([dstDir]);
  });

  test('cancel removes the destination and the state, leaves the source intact; idempotent', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const req = request(b);
    const before = snapshot(srcDir);
    await driver.migrationCancel(req); // nothing started: fine
    await driver.migrationStart(req);
    expect(await driver.migrationContinue(req)).toBe(false);
    expect(await driver.migrationContinue(req)).toBe(false);
    await driver.migrationCancel(req);
    expect(existsSync(dstDir)).toBe(false);
    expect(existsSync(statePath)).toBe(false);
    expect(readdirSync(b.root)).toEqual([]);
    expect(differences(before, snapshot(srcDir))).toEqual([]);
    expect(existsSync(srcDir + '.access.json')).toBe(true);
    await driver.migrationCancel(req);
    expect(await driver.migrationGetProgress(req)).toMatchObject({ total_progress: 0 });
    // Cancel after phase 1 as well, then a new start begins from nothing.
    await driver.migrationStart(req);
    await continueToEnd(driver, req);
    await driver.migrationCancel(req);
    expect(existsSync(dstDir)).toBe(false);
    await driver.migrationStart(req);
    expect(readStateFile()).toMatchObject({ status: 'copying', bytesCopied: 0 });
  });

  test('refusals: another kind, a destination holding data, another migration state', async () => {
    await buildSourceShare();
    const driver = new LocalShareDriver(a);
    const c = cfg('ferry@nfs-c', 'local-b');
    await expect(driver.migrationStart(request(c))).rejects.toBeInstanceOf(DriverError); // other kind
    await expect(driver.migrationStart(request(cfg('ferry@nfs-a')))).rejects.toBeInstanceOf(DriverError); // same host
    await expect(driver.migrationStart(request(b, '../escape'))).rejects.toBeInstanceOf(DriverError);
    expect(existsSync(b.root)).toBe(false); // nothing was written anywhere
    // Cancel and progress of a migration that could never start: nothing to do, so no error (a rollback may ask).
    await driver.migrationCancel(request(c));
    expect(await driver.migrationGetProgress(request(c))).toMatchObject({ total_progress: 0 });
    await expect(driver.migrationCancel(request(b, '../escape'))).rejects.toBeInstanceOf(DriverError);

    // A destination directory with data and no migration state is somebody's share: not overwritten.
    mkdirSync(dstDir, { recursive: true });
    writeFileSync(join(dstDir, 'precious'), 'keep me');
    await expect(driver.migrationStart(request(b))).rejects.toThrow(/not an empty directory/);
    await expect(driver.migrationCancel(request(b))).rejects.toBeInstanceOf(DriverError);
    expect(readFileSync(join(dstDir, 'precious'), 'utf8')).toBe('keep me');
    rmSync(dstDir, { recursive: true });

    // An empty one (created ahead by the caller) is adopted.
    mkdirSync(dstDir, { recursive: true });
    await driver.migrationStart(request(b));
    // Another source into the same destination share is refused while this state is there.
    const other = 'share-33333333-3333-4333-a333-333333333333';
    await driver.createShare({ name: other, sizeGb: 1, proto: 'NFS', pool: 'pool0' });
    await expect(driver.migrationStart(request(b, DST, other))).rejects.toThrow(/holds the migration of/);
    // A missing source share is refused.
    await expect(driver.migrationStart(request(b, 'share-44444444-4444-4444-a444-444444444444', 'share-55555555-5555-4555-a555-555555555555'))).rejects.toThrow(/does not exist/);
  });
});

/**
 * What a cold or live migration makes durable before it returns (docs/compute-driver.md, "What each
 * fsync of a move protects against"): besides the disk's and the record's bytes, the names the move
 * made: a cold migration's staging directory and its rename to `incoming/<uuid>`, a live
 * migration's arrived `guests/<uuid>` and its rename into `guests/`, so a power loss after the flow
 * recorded the move done (and the source let its disk go) cannot lose the arrived disk. In
 * UNIT_ISOLATED: it spies on FileHandle's sync, which every file handle of the process shares.
 */
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { computeRoot, imagePath, SMALL, UUID_A, cmp1, cmp2, useLocalComputeHosts } from '../support/local-compute-hosts.js';

useLocalComputeHosts();
afterEach(() => vi.restoreAllMocks());

/** Records the inode of every directory fsynced from now on. */
async function spyDirectorySyncs(): Promise<Set<number>> {
  const probe = await open(imagePath, 'r');
  const proto = Object.getPrototypeOf(probe) as { sync(this: { stat(): Promise<{ ino: number; isDirectory(): boolean }> }): Promise<void> };
  await probe.close();
  const sync = proto.sync;
  const syncedDirs = new Set<number>();
  vi.spyOn(proto, 'sync').mockImplementation(async function (this: { stat(): Promise<{ ino: number; isDirectory(): boolean }> }) {
    const st = await this.stat();
    if (st.isDirectory()) syncedDirs.add(st.ino);
    return sync.call(this);
  });
  return syncedDirs;
}

describe('migrateDiskAndPowerOff', () => {
  it('fsyncs the arrived directory and the incoming directory its rename changed', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    const syncedDirs = await spyDirectorySyncs();

    // Act
    await cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', SMALL);

    // Assess
    const incoming = join(computeRoot, 'cmp2', 'incoming');
    expect(syncedDirs).toContain((await stat(join(incoming, UUID_A))).ino);
    expect(syncedDirs).toContain((await stat(incoming)).ino);
  });
});

describe('liveMigration', () => {
  it('fsyncs the arrived guest directory and the guests directory its rename changed', async () => {
    // Prepare
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
    await cmp2.preLiveMigration({ uuid: UUID_A, flavor: SMALL }, 'cmp1');
    const syncedDirs = await spyDirectorySyncs();

    // Act
    await cmp1.liveMigration(UUID_A, 'cmp2');

    // Assess
    const guests = join(computeRoot, 'cmp2', 'guests');
    expect(syncedDirs).toContain((await stat(join(guests, UUID_A))).ino);
    expect(syncedDirs).toContain((await stat(guests)).ino);
  });
});

/**
 * What a cold migration makes durable before it returns (docs/compute-driver.md, "What each fsync of
 * a move protects against"): besides the disk's and the record's bytes, the staging directory's
 * names and its rename to `incoming/<uuid>`, so a power loss after the flow recorded the copy done
 * cannot lose the arrived disk. In UNIT_ISOLATED: it spies on FileHandle's sync, which every file
 * handle of the process shares.
 */
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { computeRoot, imagePath, SMALL, UUID_A, cmp1, useLocalComputeHosts } from '../support/local-compute-hosts.js';

useLocalComputeHosts();

describe('migrateDiskAndPowerOff', () => {
  it('fsyncs the arrived directory and the incoming directory its rename changed', async () => {
    // Prepare: record the inode of every directory fsynced.
    await cmp1.spawn({ uuid: UUID_A, flavor: SMALL, image: { path: imagePath } });
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

    // Act
    await cmp1.migrateDiskAndPowerOff(UUID_A, 'cmp2', SMALL);

    // Assess
    const incoming = join(computeRoot, 'cmp2', 'incoming');
    expect(syncedDirs).toContain((await stat(join(incoming, UUID_A))).ino);
    expect(syncedDirs).toContain((await stat(incoming)).ino);
  });
});

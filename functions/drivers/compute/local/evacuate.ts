/**
 * Evacuation onto a local host (Nova's rebuild with recreate=True): the guest of a down host is
 * rebuilt here from the source's root disk when the shared storage still has it, else from its image.
 */
import { join } from 'node:path';
import { logger } from '../../../core/logger.js';
import { ROOT_DEVICE_NAME, type EvacuationSource, type GuestInfo, type GuestSpec } from '../driver.js';
import { sparseCopy, statOrUndefined } from './files.js';
import type { LocalHost } from './host.js';
import { DISK_FILE, GUESTS_DIR, isPeerDown, type GuestState } from './layout.js';
import { discardUnusedStream, type GuestLifecycle } from './lifecycle.js';

export class Evacuation {
  constructor(
    private readonly h: LocalHost,
    private readonly lifecycle: GuestLifecycle,
  ) {}

  async spawnEvacuated(spec: GuestSpec, source: EvacuationSource): Promise<GuestInfo> {
    this.h.checkSpec(spec);
    const sourceDir = this.h.peer(source.host);
    await this.h.ensureUp();
    try {
      const sourceDown = source.down === true || (await isPeerDown(sourceDir, { missingIsDown: true }));
      if (!sourceDown) throw this.h.fail(`source host ${source.host} is up: refusing to evacuate ${spec.uuid}`, { uuid: spec.uuid, source: source.host });
      return await this.h.locked(async () => {
        const existing = await this.h.readState(spec.uuid);
        if (existing) {
          if (existing.evacuatedFrom !== source.host) throw this.h.fail(`guest ${spec.uuid} already exists on this host`, { uuid: spec.uuid });
          return this.lifecycle.respawnMigrated(existing, spec);
        }
        const sourceState = await this.sourceState(spec.uuid, sourceDir, source.host);
        const sourceDisk = join(sourceDir, GUESTS_DIR, spec.uuid, DISK_FILE);
        const diskReadable = sourceState?.rootDisk === 'local' && (await statOrUndefined(sourceDisk))?.isFile() === true;
        const volumeBacked = sourceState ? sourceState.rootDisk === 'volume' : !spec.image && (spec.blockDevices ?? []).some((bd) => bd.mountpoint === ROOT_DEVICE_NAME);
        if (volumeBacked && !(spec.blockDevices ?? []).some((bd) => bd.mountpoint === ROOT_DEVICE_NAME)) {
          throw this.h.fail(`volume-backed guest ${spec.uuid} needs its boot volume at ${ROOT_DEVICE_NAME}`, { uuid: spec.uuid });
        }
        if (!volumeBacked && !diskReadable && !spec.image) {
          throw this.h.fail(`the root disk of ${spec.uuid} on ${source.host} is unreadable and no image was given`, { uuid: spec.uuid, source: source.host });
        }
        const extra: Partial<GuestState> = { evacuatedFrom: source.host };
        const imageRef = spec.imageRef ?? sourceState?.imageRef;
        return this.lifecycle.build({ ...spec, ...(imageRef !== undefined ? { imageRef } : {}) }, async (dir) => {
          if (volumeBacked) return 'volume';
          if (diskReadable) await sparseCopy(sourceDisk, join(dir, DISK_FILE));
          else await this.lifecycle.writeImage(spec.image!, join(dir, DISK_FILE), spec);
          return 'local';
        }, extra);
      });
    } finally {
      discardUnusedStream(spec.image);
    }
  }

  /**
   * The guest's state on the dead source, when its storage still answers. A state that cannot be
   * read is what a failed host leaves: logged, and the guest is rebuilt from what the call gave.
   */
  private async sourceState(uuid: string, sourceDir: string, sourceHost: string): Promise<GuestState | undefined> {
    try {
      return await this.h.readState(uuid, sourceDir);
    } catch (e) {
      logger.warn(`compute host ${this.h.host}: the state of ${uuid} on the down host ${sourceHost} is unreadable; rebuilding from the spec`, { host: this.h.host, uuid, source: sourceHost, error: e as Error });
      return undefined;
    }
  }
}

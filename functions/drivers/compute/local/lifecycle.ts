/**
 * A guest's life on a local host: built whole in a temp directory and published (spawn, and the
 * destination side of migrations and evacuations), powered, snapshotted, destroyed.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, rename, stat, truncate, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { DriverError } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import { POWER_STATE, ROOT_DEVICE_NAME, type AttachedVolume, type Flavor, type GuestInfo, type GuestSpec, type ImageSource, type PowerState, type SnapshotFormat, type SnapshotImage } from '../driver.js';
import { qcow2ToRaw } from '../../qcow2.js';
import { QCOW2_CLUSTER_BYTES, qcow2Stream } from '../../qcow2-writer.js';
import type { HostConnections } from './connections.js';
import { countCopied, isErrno, removeTree, sparseCopy, statOrUndefined, tempName, unlinkIfPresent } from './files.js';
import { sameFlavor, type LocalHost } from './host.js';
import { DISK_FILE, GIB, GUESTS_DIR, IMAGE_ID, MIGRATION_FILE, SNAPSHOTS_DIR, type GuestState } from './layout.js';
import { sparseFileStream } from './sparse-stream.js';

/** Image streams a spawn has read from. */
const consumed = new WeakSet<Readable>();

/** A Readable passed as an image and not consumed (idempotent spawn, failure before the copy) is destroyed, not leaked. */
export function discardUnusedStream(image: ImageSource | undefined): void {
  if (image && 'stream' in image && typeof image.stream !== 'function' && !consumed.has(image.stream)) image.stream.destroy();
}

export class GuestLifecycle {
  constructor(
    private readonly h: LocalHost,
    private readonly conns: HostConnections,
  ) {}

  async spawn(spec: GuestSpec): Promise<GuestInfo> {
    this.h.checkSpec(spec);
    await this.h.ensureUp();
    try {
      return await this.h.locked(async () => {
        const existing = await this.h.readState(spec.uuid);
        if (existing) return this.respawn(existing, spec);
        const volumeBacked = !spec.image;
        if (volumeBacked && !(spec.blockDevices ?? []).some((bd) => bd.mountpoint === ROOT_DEVICE_NAME)) {
          throw this.h.fail(`guest ${spec.uuid} has neither an image nor a boot volume at ${ROOT_DEVICE_NAME}`, { uuid: spec.uuid });
        }
        return this.build(spec, async (dir) => {
          if (!spec.image) return 'volume';
          await this.writeImage(spec.image, join(dir, DISK_FILE), spec);
          return 'local';
        });
      });
    } finally {
      discardUnusedStream(spec.image);
    }
  }

  /** A retried spawn: the same spec is fine (missing volumes get attached), anything else is refused. */
  private async respawn(existing: GuestState, spec: Omit<GuestSpec, 'image'> & { image?: ImageSource }): Promise<GuestInfo> {
    if (!existing.defined) throw this.h.fail(`guest ${spec.uuid} has kept disks on this host; revert, confirm or destroy them first`, { uuid: spec.uuid });
    const sameImage = spec.imageRef === undefined || existing.imageRef === undefined || spec.imageRef === existing.imageRef;
    const sameRoot = existing.rootDisk === (spec.image ? 'local' : 'volume');
    if (!sameFlavor(existing.flavor, spec.flavor) || !sameImage || !sameRoot) {
      throw this.h.fail(`guest ${spec.uuid} already exists with a different spec`, { uuid: spec.uuid, existingFlavor: existing.flavor, existingImageRef: existing.imageRef });
    }
    let state = existing;
    for (const bd of spec.blockDevices ?? []) state = await this.conns.attachInState(state, bd);
    return this.h.info(state);
  }

  /** A retried finish of a migration or evacuation: the guest is here with the same flavor; missing volumes get attached. */
  async respawnMigrated(existing: GuestState, spec: Omit<GuestSpec, 'image'>): Promise<GuestInfo> {
    if (!existing.defined) throw this.h.fail(`guest ${spec.uuid} has kept disks on this host`, { uuid: spec.uuid });
    if (!sameFlavor(existing.flavor, spec.flavor)) throw this.h.fail(`guest ${spec.uuid} already exists with a different flavor`, { uuid: spec.uuid });
    let state = existing;
    for (const bd of spec.blockDevices ?? []) state = await this.conns.attachInState(state, bd);
    return this.h.info(state);
  }

  /**
   * Builds a guest in a temp directory (root disk by `fillDisk`), connects its volumes, writes its
   * state and publishes the directory as `guests/<uuid>`. On failure nothing of it is left:
   * neither the directory nor the connections it made (what cannot be removed is logged).
   * `prepared`: a directory that already holds the disk (an arrived migration); kept on failure.
   */
  async build(spec: Omit<GuestSpec, 'image'>, fillDisk: (dir: string) => Promise<'local' | 'volume'>, extra: Partial<GuestState> = {}, prepared?: string): Promise<GuestInfo> {
    const flavor = this.h.checkFlavor(spec.flavor);
    const dir = prepared ?? join(this.h.dir, GUESTS_DIR, tempName(spec.uuid));
    const made: string[] = [];
    try {
      await mkdir(dir, { recursive: true });
      const rootDisk = await fillDisk(dir);
      if (rootDisk === 'local') await this.fitDisk(join(dir, DISK_FILE), flavor, spec.uuid);
      const volumes: AttachedVolume[] = [];
      for (const bd of spec.blockDevices ?? []) {
        const { key, created } = await this.conns.connect(bd.connectionInfo);
        if (created) made.push(key);
        volumes.push(this.conns.attached(bd, key));
      }
      const powerOn = spec.powerOn ?? true;
      const state: GuestState = {
        version: 1,
        uuid: spec.uuid,
        defined: true,
        powerState: powerOn ? POWER_STATE.RUNNING : POWER_STATE.SHUTDOWN,
        flavor,
        rootDisk,
        volumes,
        bootCount: powerOn ? 1 : 0,
        ...extra,
      };
      if (spec.imageRef !== undefined) state.imageRef = spec.imageRef;
      await this.h.writeState(state, dir);
      await unlinkIfPresent(join(dir, MIGRATION_FILE));
      try {
        await rename(dir, this.h.guestDir(spec.uuid));
      } catch (e) {
        if (isErrno(e, 'EEXIST', 'ENOTEMPTY')) throw this.h.fail(`guest ${spec.uuid} appeared meanwhile`, { uuid: spec.uuid }, e);
        throw e;
      }
      return this.h.info(state);
    } catch (e) {
      if (!prepared) await this.removeLeftover(dir, spec.uuid);
      await this.conns.undoConnections(made, { uuid: spec.uuid, why: 'build' });
      if (e instanceof DriverError) throw e;
      throw this.h.fail(`cannot build guest ${spec.uuid}: ${(e as Error).message}`, { uuid: spec.uuid }, e);
    }
  }

  /** Removes a temp tree of a failed call; one that cannot be removed is logged (a dot-name, never listed as a guest). */
  async removeLeftover(dir: string, uuid: string): Promise<void> {
    try {
      await removeTree(dir);
    } catch (e) {
      logger.error(`compute host ${this.h.host}: a temp directory of a failed call is left behind`, { host: this.h.host, uuid, dir, error: e as Error });
    }
  }

  /** Sparse-extends a root disk to the flavor's root_gb; refuses a disk larger than the flavor allows. */
  private async fitDisk(path: string, flavor: Flavor, uuid: string): Promise<void> {
    const st = await statOrUndefined(path);
    if (!st?.isFile()) throw this.h.fail(`guest ${uuid} has no root disk`, { uuid });
    if (flavor.rootGb === 0) return;
    const want = flavor.rootGb * GIB;
    if (st.size > want) throw this.h.fail(`root disk of ${uuid} is ${st.size} bytes, larger than the flavor's ${flavor.rootGb} GiB (cannot resize down)`, { uuid, bytes: st.size, rootGb: flavor.rootGb });
    if (st.size < want) await truncate(path, want);
  }

  /**
   * Writes the image as the root disk `dest` (a new file). A qcow2 image becomes a sparse raw disk
   * (qcow2.ts: checked first, at most the flavor's root disk); any other is the disk's bytes.
   */
  async writeImage(image: ImageSource, dest: string, spec: GuestSpec): Promise<void> {
    if (image.diskFormat === 'qcow2') return this.writeQcow2Image(image, dest, spec);
    const source = await this.openImage(image, spec);
    try {
      await pipeline(source, createWriteStream(dest, { flags: 'wx' }));
    } catch (e) {
      throw this.h.fail(`cannot write the image of ${spec.uuid}: ${(e as Error).message}`, { uuid: spec.uuid }, e);
    }
  }

  /** A qcow2 image (a file: qemu-img reads it with seeks) read into the raw disk `dest`; what passed is counted in localCopyStats. */
  private async writeQcow2Image(image: ImageSource, dest: string, spec: GuestSpec): Promise<void> {
    const flavor = this.h.checkFlavor(spec.flavor);
    const qcow2 = 'path' in image ? image.path : join(dirname(dest), tempName('image.qcow2'));
    try {
      if (!('path' in image)) await pipeline(await this.openImage(image, spec), createWriteStream(qcow2, { flags: 'wx' }));
      await qcow2ToRaw(qcow2, dest, flavor.rootGb > 0 ? flavor.rootGb * GIB : undefined);
      countCopied((await stat(qcow2)).size, (await stat(dest)).blocks * 512);
    } catch (e) {
      throw this.h.fail(`cannot write the image of ${spec.uuid}: ${(e as Error).message}`, { uuid: spec.uuid }, e);
    } finally {
      if (!('path' in image)) await unlinkIfPresent(qcow2);
    }
  }

  private async openImage(image: ImageSource, spec: GuestSpec): Promise<Readable> {
    let source: Readable;
    if ('path' in image) {
      const st = await statOrUndefined(image.path);
      if (!st?.isFile()) throw this.h.fail(`image ${image.path} is not a readable file`, { uuid: spec.uuid, image: image.path });
      source = createReadStream(image.path);
    } else if ('data' in image) {
      source = Readable.from([Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength)]);
    } else if ('stream' in image) {
      source = typeof image.stream === 'function' ? await image.stream() : image.stream;
      consumed.add(source);
    } else {
      throw this.h.fail('invalid image source', { uuid: spec.uuid });
    }
    return source;
  }

  async destroy(uuid: string, options: { keepDisks?: boolean } = {}): Promise<void> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    await this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      if (state) {
        // Connections first: a crash in between leaves a guest that still claims them, which a retry
        // disconnects, never a connection nobody claims.
        for (const v of state.volumes) await this.conns.disconnectKey(v.connectionKey, { uuid, mountpoint: v.mountpoint });
        if (options.keepDisks) {
          if (state.defined || state.volumes.length > 0) {
            await this.h.writeState({ ...state, defined: false, powerState: POWER_STATE.SHUTDOWN, volumes: [] });
          }
        } else {
          await removeTree(this.h.guestDir(uuid));
        }
      }
      if (!options.keepDisks) await this.removeIncoming(uuid);
    });
  }

  /**
   * The source's cleanup after a move (confirm of a cold migration, post of a live one): removes
   * the disks a guest left here without a definition, with the connections they claim. Nothing
   * there: done. A guest still defined here is refused with `definedRefusal` (the move did not happen).
   */
  async removeReleased(uuid: string, definedRefusal: string): Promise<void> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    await this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      if (!state) return;
      if (state.defined) throw this.h.fail(definedRefusal, { uuid });
      for (const v of state.volumes) await this.conns.disconnectKey(v.connectionKey, { uuid });
      await removeTree(this.h.guestDir(uuid));
    });
  }

  /** Removes an incoming migration of `uuid` on this host with the connections it made. */
  async removeIncoming(uuid: string): Promise<void> {
    let volumes: AttachedVolume[] = [];
    try {
      volumes = (await this.h.readIncoming(uuid))?.volumes ?? [];
    } catch (e) {
      // An unreadable record cannot say which connections it made: the tree goes, and what it
      // connected stays for the audit (a connection nobody claims), logged here.
      logger.error(`compute host ${this.h.host}: unreadable incoming migration of ${uuid} removed; its connections are left`, { host: this.h.host, uuid, error: e as Error });
    }
    for (const v of volumes) await this.conns.disconnectKey(v.connectionKey, { uuid, mountpoint: v.mountpoint, incoming: true });
    await removeTree(this.h.incomingDir(uuid));
  }

  private async setPower(uuid: string, fn: (s: GuestState) => GuestState | undefined): Promise<void> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    await this.h.locked(async () => {
      const state = await this.h.definedState(uuid);
      const next = fn(state);
      if (next) await this.h.writeState(next);
    });
  }

  async powerOff(uuid: string): Promise<void> {
    await this.setPower(uuid, (s) => (s.powerState === POWER_STATE.SHUTDOWN ? undefined : { ...s, powerState: POWER_STATE.SHUTDOWN }));
  }

  async powerOn(uuid: string): Promise<void> {
    await this.setPower(uuid, (s) => (s.powerState === POWER_STATE.RUNNING ? undefined : { ...s, powerState: POWER_STATE.RUNNING, bootCount: s.bootCount + 1 }));
  }

  /**
   * Pause, unpause, suspend, resume: the guest's power state moves from one of `from` to `to`
   * (already `to`: a re-run, nothing to do); from any other state the hypervisor refuses, as
   * libvirt does (pausing a shut-off domain fails).
   */
  async transition(uuid: string, what: string, from: readonly PowerState[], to: PowerState): Promise<void> {
    await this.setPower(uuid, (s) => {
      if (s.powerState === to) return undefined;
      if (!from.includes(s.powerState)) throw this.h.fail(`cannot ${what} guest ${uuid} in power state ${s.powerState}`, { uuid });
      return { ...s, powerState: to };
    });
  }

  async reboot(uuid: string, type: 'SOFT' | 'HARD' = 'SOFT'): Promise<void> {
    if (type !== 'SOFT' && type !== 'HARD') throw this.h.fail(`invalid reboot type ${JSON.stringify(type)}`, { uuid });
    await this.setPower(uuid, (s) => ({ ...s, powerState: POWER_STATE.RUNNING, bootCount: s.bootCount + 1 }));
  }

  async getPowerState(uuid: string): Promise<PowerState> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    const state = await this.h.readState(uuid);
    return state?.defined ? state.powerState : POWER_STATE.NOSTATE;
  }

  async snapshot(uuid: string, imageId: string, options: { diskFormat?: SnapshotFormat } = {}): Promise<SnapshotImage> {
    this.h.checkUuid(uuid);
    if (typeof imageId !== 'string' || !IMAGE_ID.test(imageId)) throw this.h.fail(`invalid image id ${JSON.stringify(imageId)}`, { uuid, imageId });
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      if (!state) throw this.h.fail(`guest ${uuid} is not on this host`, { uuid });
      if (state.rootDisk !== 'local') throw this.h.fail(`guest ${uuid} is volume-backed: snapshot its boot volume instead`, { uuid });
      // A point-in-time copy, unlinked once open: the stream reads it, and nothing stays behind.
      const disk = join(this.h.guestDir(uuid), DISK_FILE);
      const copy = join(this.h.dir, SNAPSHOTS_DIR, tempName(imageId));
      try {
        // The copy is unlinked once open and never read after a crash: no fsync. A qcow2 image
        // stores whole 64 KiB clusters, so the copy leaves each all-zero cluster a hole.
        const qcow2 = options.diskFormat === 'qcow2';
        const { sizeBytes, extents } = await sparseCopy(disk, copy, { durable: false, ...(qcow2 ? { zeroBlockBytes: QCOW2_CLUSTER_BYTES } : {}) });
        const fh = await openUnlinked(copy);
        if (qcow2) {
          // Streamed as qcow2 by Ferry's writer (qcow2-writer.ts), not `qemu-img convert`: no process
          // start, no second file written and read back. What it reads of the copy is counted.
          const { layout, stream } = qcow2Stream(fh, sizeBytes, extents);
          countCopied(layout.dataClusters * QCOW2_CLUSTER_BYTES, 0);
          return { imageId, sizeBytes, diskFormat: 'qcow2', imageBytes: layout.imageBytes, stream };
        }
        // The copy's data is where the copy wrote: the stream reads those and makes up the holes.
        return { imageId, sizeBytes, diskFormat: 'raw', imageBytes: sizeBytes, extents, stream: sparseFileStream(fh, sizeBytes, extents) };
      } catch (e) {
        await unlinkIfPresent(copy);
        throw this.h.fail(`cannot snapshot guest ${uuid}: ${(e as Error).message}`, { uuid, imageId }, e);
      }
    });
  }
}

/** Opens `path` for reading and unlinks it: the handle keeps the bytes until it is closed. */
async function openUnlinked(path: string): Promise<FileHandle> {
  const fh = await open(path, 'r');
  try {
    await unlinkIfPresent(path);
  } catch (e) {
    await fh.close();
    throw e;
  }
  return fh;
}

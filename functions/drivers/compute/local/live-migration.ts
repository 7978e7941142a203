/**
 * Live migration between local hosts of one root (Nova's pre_live_migration, live_migration,
 * post_live_migration[_at_destination], rollback_live_migration_at_destination): the destination
 * prepares `incoming/<uuid>`, the source pre-copies the root disk while the guest runs, then under
 * the lock copies what changed and switches the guest over.
 */
import { mkdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { DriverError } from '../../../core/errors.js';
import { logger } from '../../../core/logger.js';
import { POWER_STATE, type AttachedVolume, type GuestInfo, type GuestSpec, type LiveMigrateData, type LiveMigrationOptions, type MigrationProgress } from '../driver.js';
import type { HostConnections } from './connections.js';
import { CopyAborted, DEFAULT_CHUNK_BYTES, fsyncDirectory, markBeforeCopy, sparseCopy, statOrUndefined, syncChangedChunks, unchangedSince, unlinkIfPresent, writeJsonAtomic, type CopyStartMark } from './files.js';
import type { LocalHost } from './host.js';
import { DISK_FILE, GUESTS_DIR, MIGRATION_FILE, STATE_FILE, isPeerDown, type GuestState, type IncomingMigration } from './layout.js';
import type { GuestLifecycle } from './lifecycle.js';

export class LiveMigration {
  constructor(
    private readonly h: LocalHost,
    private readonly conns: HostConnections,
    private readonly lifecycle: GuestLifecycle,
  ) {}

  async preLiveMigration(spec: Omit<GuestSpec, 'image'>, sourceHost: string): Promise<LiveMigrateData> {
    this.h.checkSpec(spec);
    const sourceDir = this.h.peer(sourceHost);
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const existing = await this.h.readState(spec.uuid);
      if (existing) throw this.h.fail(`guest ${spec.uuid} already exists on this host`, { uuid: spec.uuid });
      const sourceState = await this.h.readState(spec.uuid, sourceDir);
      if (!sourceState?.defined) throw this.h.fail(`guest ${spec.uuid} is not defined on ${sourceHost}`, { uuid: spec.uuid, source: sourceHost });
      const current = await this.h.readIncoming(spec.uuid);
      if (current && (current.kind !== 'live' || current.source !== sourceHost)) throw this.h.fail(`another migration of ${spec.uuid} is arriving`, { uuid: spec.uuid });
      const volumes: AttachedVolume[] = [];
      const made: string[] = [];
      const dir = this.h.incomingDir(spec.uuid);
      try {
        for (const bd of spec.blockDevices ?? []) {
          const { key, created } = await this.conns.connect(bd.connectionInfo);
          if (created) made.push(key);
          volumes.push(this.conns.attached(bd, key));
        }
        const record: IncomingMigration = { version: 1, uuid: spec.uuid, kind: 'live', source: sourceHost, rootDisk: sourceState.rootDisk, flavor: this.h.checkFlavor(spec.flavor), volumes };
        const imageRef = spec.imageRef ?? sourceState.imageRef;
        if (imageRef !== undefined) record.imageRef = imageRef;
        await writeJsonAtomic(join(dir, MIGRATION_FILE), record);
      } catch (e) {
        await this.conns.undoConnections(made, { uuid: spec.uuid, why: 'pre_live_migration' });
        if (!current) await this.lifecycle.removeLeftover(dir, spec.uuid);
        if (e instanceof DriverError) throw e;
        throw this.h.fail(`pre_live_migration of ${spec.uuid} failed: ${(e as Error).message}`, { uuid: spec.uuid }, e);
      }
      return {
        uuid: spec.uuid,
        sourceHost,
        destHost: this.h.host,
        rootDisk: sourceState.rootDisk,
        destConnections: Object.fromEntries(volumes.map((v) => [v.mountpoint, v.connectionKey])),
      };
    });
  }

  async liveMigration(uuid: string, destHost: string, options: LiveMigrationOptions = {}): Promise<void> {
    this.h.checkUuid(uuid);
    const destDir = this.h.peer(destHost);
    await this.h.ensureUp();
    if (await isPeerDown(destDir)) throw this.h.fail(`destination host ${destHost} is down`, { uuid, dest: destHost });
    const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    const incomingDir = this.h.incomingDir(uuid, destDir);
    const aborted = () => this.h.fail(`live migration of ${uuid} to ${destHost} was aborted; the guest stays on ${this.h.host}`, { uuid, dest: destHost, aborted: true });

    // 1. Check and mark (under the lock): the guest is here, the destination is prepared.
    const start = await this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      const m = state?.migration;
      if (state && !state.defined && m?.kind === 'live' && m.role === 'source' && m.peer === destHost) return { state, switched: true };
      if (!state?.defined) throw this.h.fail(`guest ${uuid} is not defined on this host`, { uuid });
      if (m && !(m.kind === 'live' && m.peer === destHost)) throw this.h.fail(`guest ${uuid} is already migrating (${m.kind} with ${m.peer})`, { uuid });
      const incoming = await this.h.readIncoming(uuid, destDir);
      if (!incoming || incoming.kind !== 'live' || incoming.source !== this.h.host) {
        throw this.h.fail(`pre_live_migration of ${uuid} has not run on ${destHost}`, { uuid, dest: destHost });
      }
      const here = state.volumes.map((v) => v.mountpoint).sort().join(',');
      const there = (incoming.volumes ?? []).map((v) => v.mountpoint).sort().join(',');
      if (here !== there) throw this.h.fail(`the destination's volumes (${there || 'none'}) differ from the guest's (${here || 'none'})`, { uuid, dest: destHost });
      const marked: GuestState = { ...state, migration: { kind: 'live', role: 'source', peer: destHost } };
      await this.h.writeState(marked);
      return { state: marked, switched: false };
    });
    if (start.switched) {
      // A retry after the source was released: finish publishing the destination if it is not yet.
      await this.publishDestination(uuid, destDir, destHost);
      return;
    }

    // 2. Pre-copy, outside the lock: the guest keeps running on the source.
    const src = join(this.h.guestDir(uuid), DISK_FILE);
    const part = join(incomingDir, `.disk-part`);
    let lastPercent = -1;
    const report = (p: MigrationProgress) => {
      if (p.percent < lastPercent) return;
      lastPercent = p.percent;
      options.onProgress?.(p);
    };
    let precopied: CopyStartMark | undefined;
    try {
      if (start.state.rootDisk === 'local') {
        await unlinkIfPresent(part);
        precopied = await markBeforeCopy(src);
        await sparseCopy(src, part, {
          chunkBytes,
          signal: options.signal,
          ...(options.bytesPerSecond ? { bytesPerSecond: options.bytesPerSecond } : {}),
          onChunk: (done, total) => report({ phase: 'disk', processedBytes: done, totalBytes: total, percent: Math.min(99, Math.floor((done / total) * 100)) }),
        });
      }
      if (options.signal?.aborted) throw new CopyAborted();
    } catch (e) {
      await this.unmark(uuid, part);
      if (e instanceof CopyAborted) throw aborted();
      throw this.h.fail(`live migration of ${uuid} to ${destHost} failed: ${(e as Error).message}`, { uuid, dest: destHost }, e);
    }

    // 3. Stop-and-copy and switch-over (under the lock): what changed meanwhile is copied again,
    // then the source lets the guest go and the destination defines it.
    try {
      await this.h.locked(async () => {
        const state = await this.h.readState(uuid);
        if (!state?.defined || state.migration?.kind !== 'live' || state.migration.peer !== destHost) {
          throw this.h.fail(`guest ${uuid} changed during its live migration`, { uuid });
        }
        const incoming = await this.h.readIncoming(uuid, destDir);
        if (!incoming) throw this.h.fail(`the destination ${destHost} dropped the migration of ${uuid}`, { uuid });
        if (options.signal?.aborted) throw new CopyAborted();
        const totalBytes = state.rootDisk === 'local' ? await this.h.diskBytes(uuid) : 0;
        if (state.rootDisk === 'local') {
          // The dirty pages of a pre-copy: none when the disk's times show no write since the
          // pre-copy began; else every chunk of either file is compared (a full disk read twice).
          if (!precopied || !(await unchangedSince(src, precopied))) await syncChangedChunks(src, part, chunkBytes);
          await rename(part, join(incomingDir, DISK_FILE));
        }
        const destState: GuestState = {
          version: 1,
          uuid,
          defined: true,
          powerState: state.powerState,
          flavor: incoming.flavor ?? state.flavor,
          rootDisk: state.rootDisk,
          volumes: incoming.volumes ?? [],
          bootCount: state.bootCount,
          migration: { kind: 'live', role: 'dest', peer: this.h.host },
        };
        if (incoming.imageRef ?? state.imageRef) destState.imageRef = incoming.imageRef ?? state.imageRef;
        await this.h.writeState(destState, incomingDir);
        await this.h.writeState({ ...state, defined: false, powerState: POWER_STATE.SHUTDOWN, migration: { kind: 'live', role: 'source', peer: destHost } });
        await this.publishDestination(uuid, destDir, destHost);
        report({ phase: 'complete', processedBytes: totalBytes, totalBytes, percent: 100 });
      });
    } catch (e) {
      await this.unmarkIfStillHere(uuid, part);
      if (e instanceof CopyAborted) throw aborted();
      if (e instanceof DriverError) throw e;
      throw this.h.fail(`live migration of ${uuid} to ${destHost} failed at the switch-over: ${(e as Error).message}`, { uuid, dest: destHost }, e);
    }
  }

  /** Undoes step 1 after a failed copy: the partial copy goes, the guest (still defined here) loses its mark. */
  private async unmark(uuid: string, part: string): Promise<void> {
    try {
      await unlinkIfPresent(part);
    } catch (e) {
      // The partial copy is a dot-file under the destination's incoming/<uuid>: a rollback there removes it.
      logger.warn(`compute host ${this.h.host}: the partial copy of ${uuid} is left for the destination's rollback`, { host: this.h.host, uuid, part, error: e as Error });
    }
    await this.h.locked(async () => {
      const s = await this.h.readState(uuid);
      if (s?.defined && s.migration?.kind === 'live') {
        const rest = { ...s };
        delete rest.migration;
        await this.h.writeState(rest);
      }
    });
  }

  /**
   * After a failed switch-over: unmarks only a guest still defined here. A state that cannot be read
   * is not taken for "still here" (the switch-over may have happened): the mark stays, and is logged.
   */
  private async unmarkIfStillHere(uuid: string, part: string): Promise<void> {
    let state: GuestState | undefined;
    try {
      state = await this.h.readState(uuid);
    } catch (e) {
      logger.error(`compute host ${this.h.host}: after a failed switch-over the state of ${uuid} is unreadable; its live-migration mark is left`, { host: this.h.host, uuid, error: e as Error });
      return;
    }
    if (state?.defined) await this.unmark(uuid, part);
  }

  /** Moves the prepared `incoming/<uuid>` (with its state.json) to `guests/<uuid>` on the destination. */
  private async publishDestination(uuid: string, destDir: string, destHost: string): Promise<void> {
    const incomingDir = this.h.incomingDir(uuid, destDir);
    if (await this.h.readState(uuid, destDir)) return;
    if (!(await statOrUndefined(join(incomingDir, STATE_FILE)))) throw this.h.fail(`the destination ${destHost} has no prepared guest ${uuid}`, { uuid, dest: destHost });
    await unlinkIfPresent(join(incomingDir, MIGRATION_FILE));
    const guestsDir = join(destDir, GUESTS_DIR);
    await mkdir(guestsDir, { recursive: true });
    await rename(incomingDir, join(guestsDir, uuid));
    // The names durable before the source lets its disk go (postLiveMigration removes it), as a
    // cold migration's arrival: the disk's rename into the arrived directory, and that directory's
    // into guests/. ext4's ordered journal would keep them before the removal anyway; not every
    // file system does (docs/compute-driver.md, "What each fsync of a move protects against").
    await fsyncDirectory(join(guestsDir, uuid));
    await fsyncDirectory(guestsDir);
  }

  async postLiveMigration(uuid: string): Promise<void> {
    await this.lifecycle.removeReleased(uuid, `guest ${uuid} is still defined on this host: the live migration did not switch over`);
  }

  async postLiveMigrationAtDestination(uuid: string): Promise<GuestInfo> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    return this.h.locked(async () => {
      const state = await this.h.definedState(uuid);
      if (!state.migration) return this.h.info(state);
      const next = { ...state };
      delete next.migration;
      await this.h.writeState(next);
      return this.h.info(next);
    });
  }

  async rollbackLiveMigrationAtDestination(uuid: string): Promise<void> {
    this.h.checkUuid(uuid);
    await this.h.ensureUp();
    await this.h.locked(async () => {
      const state = await this.h.readState(uuid);
      if (state?.defined) throw this.h.fail(`guest ${uuid} already runs on this host: the live migration switched over, nothing to roll back`, { uuid });
      await this.lifecycle.removeIncoming(uuid);
    });
  }
}

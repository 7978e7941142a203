/**
 * The local share driver: a share is a directory `<root>/<name>` whose absolute path is its export
 * location, so an operator can put data in and read it back. Access rules are recorded beside it
 * in `<root>/<name>.access.json`; a share whose rules are all `ro` is made read-only (mode 0555),
 * any `rw` rule (or none) makes it writable again (0755). The directory is this kind's own setting
 * (LocalShareBackendConfig.root); nothing outside the driver reads it.
 *
 * Kinds: `local-a` backends support driver-assisted migration between each other (declared in
 * `features`, which migration_check_compatibility answers from); `local-b` supports none, and its
 * migration steps throw a DriverError. The migration steps (M/share/driver.py migration_start,
 * _continue, _complete, _cancel, _get_progress) are built on local-migration-state.ts and
 * local-migration-copy.ts: the state is kept on the destination backend in
 * `<destRoot>/<destName>.migration.json`, migration_continue copies for a bounded time
 * (FERRY_SHARE_MIGRATION_SLICE_MS, default 2000 ms) and resumes from that state in any process,
 * migration_complete does a final sync, then removes the source share and its rules.
 *
 * The size: a directory has none, so the share's size is a quota recorded beside it
 * (`<root>/<name>.size.json`, local-size.ts): extend records a larger one, shrink refuses a size
 * below what the directory holds (ShareShrinkingPossibleDataLoss), shareUsage reports both.
 */
import { chmod, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import { ConfigurationError, DriverError } from '../../core/errors.js';
import type {
  BackendShare,
  ConnectionInfo,
  DriverAccessRule,
  LocalShareBackendConfig,
  MigrationCompatibility,
  MigrationProgress,
  MigrationRequest,
  ShareBackendConfig,
  ShareDriver,
  ShareSizeRestorer,
  ShareDriverFeatures,
  ShareDriverKind,
  SharePoolCapabilities,
  ShareUsage,
} from './driver.js';
// The error class is a value; the interface types above are types only.
import { ShareShrinkingPossibleDataLoss } from './driver.js';
import { GIB, readRecordedSize, removeRecordedSize, usedBytes, writeRecordedSize } from './local-size.js';
import { copyPass, directoryExists, isEmptyDirectory, pathExists, planSource, removeTree } from './local-migration-copy.js';
import {
  newState,
  progressOf,
  readState,
  removeState,
  sameMigration,
  serialized,
  sliceBudgetMs,
  STATE_SUFFIX,
  writeState,
  type MigrationEndpoints,
  type MigrationState,
} from './local-migration-state.js';

const NAME_RE = /^share-[0-9a-f-]{36}$/;
const RULES_SUFFIX = '.access.json';

/** A local kind's record, checked: its directory is set. Only local drivers read it. */
export function localShareBackend(config: ShareBackendConfig): LocalShareBackendConfig {
  const root = (config as Partial<LocalShareBackendConfig>).root;
  if ((config.driver !== 'local-a' && config.driver !== 'local-b') || typeof root !== 'string' || root === '') {
    throw new ConfigurationError(`share backend ${config.host} (${config.driver}) is not a local backend with a root directory.`);
  }
  return config as LocalShareBackendConfig;
}

/** What each local kind declares (ShareDriverFeatures). */
const FEATURES: Record<LocalShareBackendConfig['driver'], ShareDriverFeatures> = {
  // Whole-tree copy by the driver between two local-a backends: the source stays writable until the
  // final sync, owners, modes and times are kept; phase 2 is disruptive; shares have no snapshots
  // (so keeping "all" of them is a promise kept).
  'local-a': { driverAssistedMigrationTo: ['local-a'], migrationKeeps: { writable: true, preserveMetadata: true, nondisruptive: false, preserveSnapshots: true } },
  'local-b': { driverAssistedMigrationTo: [], migrationKeeps: { writable: false, preserveMetadata: false, nondisruptive: false, preserveSnapshots: false } },
};

function errnoCode(e: unknown): string | undefined {
  return (e as NodeJS.ErrnoException)?.code;
}

export class LocalShareDriver implements ShareDriver, ShareSizeRestorer {
  readonly kind: ShareDriverKind;
  readonly features: ShareDriverFeatures;
  private readonly config: LocalShareBackendConfig;
  constructor(config: LocalShareBackendConfig) {
    this.config = localShareBackend(config);
    this.kind = config.driver;
    this.features = FEATURES[config.driver];
  }

  private path(name: string): string {
    if (!NAME_RE.test(name)) throw new DriverError(`Invalid share name ${JSON.stringify(name)} on ${this.config.host}.`);
    return join(this.config.root, name);
  }

  async capabilities(): Promise<SharePoolCapabilities[]> {
    return this.config.pools.map((p) => ({
      pool: p.name,
      totalCapacityGb: p.totalCapacityGb,
      driverHandlesShareServers: false,
      storageProtocol: this.config.protocols.join('_'),
      vendorName: 'Ferry',
      driverVersion: '1.0',
      snapshotSupport: false,
    }));
  }

  async createShare(req: { name: string; sizeGb: number; proto: string; pool: string }): Promise<BackendShare> {
    if (!this.config.pools.some((p) => p.name === req.pool)) throw new DriverError(`Pool ${req.pool} does not exist on ${this.config.host}.`);
    if (!this.config.protocols.includes(req.proto)) throw new DriverError(`${this.config.host} does not export ${req.proto}.`);
    const path = this.path(req.name);
    await mkdir(this.config.root, { recursive: true });
    await mkdir(path, { recursive: true, mode: 0o755 });
    // A retried create finds the size it recorded; a share that was extended keeps its larger size.
    if ((await readRecordedSize(path)) === undefined) await writeRecordedSize(path, req.sizeGb);
    return { name: req.name, exportLocation: path };
  }

  async deleteShare(name: string): Promise<void> {
    const path = this.path(name);
    // A read-only export (0555) is made writable first, so its contents can be removed by a non-root user.
    try {
      await chmod(path, 0o755);
    } catch (e) {
      if (errnoCode(e) !== 'ENOENT') throw e;
    }
    await rm(path, { recursive: true, force: true });
    await rm(path + RULES_SUFFIX, { force: true });
    await removeRecordedSize(path);
  }

  async getShare(name: string): Promise<BackendShare | undefined> {
    const path = this.path(name);
    try {
      return (await stat(path)).isDirectory() ? { name, exportLocation: path } : undefined;
    } catch (e) {
      if (errnoCode(e) === 'ENOENT' || errnoCode(e) === 'ENOTDIR') return undefined;
      throw e;
    }
  }

  async listShares(): Promise<BackendShare[]> {
    let entries;
    try {
      entries = await readdir(this.config.root, { withFileTypes: true });
    } catch (e) {
      if (errnoCode(e) === 'ENOENT') throw new DriverError(`Backend root ${this.config.root} of ${this.config.host} does not exist.`);
      throw e;
    }
    return entries.filter((e) => e.isDirectory() && NAME_RE.test(e.name)).map((e) => ({ name: e.name, exportLocation: join(this.config.root, e.name) }));
  }

  async updateAccess(name: string, rules: DriverAccessRule[]): Promise<void> {
    const path = this.path(name);
    if (!(await this.getShare(name))) throw new DriverError(`Share ${name} does not exist on ${this.config.host}.`);
    await writeFile(path + RULES_SUFFIX, JSON.stringify(rules, null, 2));
    const readOnly = rules.length > 0 && rules.every((r) => r.accessLevel === 'ro');
    await chmod(path, readOnly ? 0o555 : 0o755);
  }

  async getAccess(name: string): Promise<DriverAccessRule[]> {
    try {
      return JSON.parse(await readFile(this.path(name) + RULES_SUFFIX, 'utf8')) as DriverAccessRule[];
    } catch (e) {
      if (errnoCode(e) === 'ENOENT') return [];
      throw e;
    }
  }

  async migrationCheckCompatibility(req: MigrationRequest): Promise<MigrationCompatibility> {
    const dest = req.destination.backend;
    const keeps = this.features.migrationKeeps;
    const compatible = this.features.driverAssistedMigrationTo.includes(dest.driver) && dest.host !== this.config.host && dest.protocols.includes(req.source.proto);
    return {
      compatible,
      writable: compatible && keeps.writable,
      preserve_metadata: compatible && keeps.preserveMetadata,
      nondisruptive: compatible && keeps.nondisruptive,
      preserve_snapshots: compatible && keeps.preserveSnapshots,
    };
  }

  /**
   * Both shares of a migration, checked: this driver is `local-a`, the destination is compatible
   * (not asked of cancel and get_progress, which only clean up or read what start made), both
   * names are share names, and the two share directories are distinct and not nested.
   */
  private async migrationEndpoints(req: MigrationRequest, method: string, requireCompatible: boolean): Promise<MigrationEndpoints> {
    if (this.features.driverAssistedMigrationTo.length === 0) throw new DriverError(`${method}: the ${this.kind} share driver (${this.config.host}) supports no driver-assisted migration.`);
    const dest = localShareBackend(req.destination.backend);
    const sourceDir = this.path(req.source.name);
    if (!NAME_RE.test(req.destination.name)) throw new DriverError(`Invalid destination share name ${JSON.stringify(req.destination.name)} on ${dest.host}.`);
    if (requireCompatible && !(await this.migrationCheckCompatibility(req)).compatible) {
      throw new DriverError(`${method}: ${this.config.host} (${this.kind}) cannot migrate ${req.source.name} to ${dest.host} (${dest.driver}) by itself.`);
    }
    const destDir = join(dest.root, req.destination.name);
    const a = resolve(sourceDir);
    const b = resolve(destDir);
    if (a === b || a.startsWith(b + sep) || b.startsWith(a + sep)) throw new DriverError(`${method}: source ${a} and destination ${b} overlap.`);
    return {
      sourceHost: this.config.host,
      sourceRoot: this.config.root,
      sourceName: req.source.name,
      sourceDir,
      destHost: dest.host,
      destRoot: dest.root,
      destName: req.destination.name,
      destDir,
      statePath: join(dest.root, req.destination.name + STATE_SUFFIX),
    };
  }

  /** Validates, serializes per destination share (in this process), and reports failures as DriverErrors. */
  private async migrationStep<T>(req: MigrationRequest, method: string, run: (ep: MigrationEndpoints) => Promise<T>): Promise<T> {
    const ep = await this.migrationEndpoints(req, method, method !== 'migration_cancel' && method !== 'migration_get_progress');
    return serialized(ep.destDir, async () => {
      try {
        return await run(ep);
      } catch (e) {
        if (e instanceof DriverError) throw e;
        throw new DriverError(`${method} of ${ep.sourceName} (${ep.sourceHost}) to ${ep.destName} (${ep.destHost}) failed: ${(e as Error)?.message ?? e}`, { cause: e });
      }
    });
  }

  private loadState(ep: MigrationEndpoints): MigrationState | undefined {
    const state = readState(ep.statePath);
    if (state && !sameMigration(state, ep)) {
      throw new DriverError(`${ep.statePath} holds the migration of ${state.source.name} from ${state.source.host}, not of ${ep.sourceName} from ${ep.sourceHost}.`);
    }
    return state;
  }

  async migrationStart(req: MigrationRequest): Promise<void> {
    await this.migrationStep(req, 'migration_start', async (ep) => {
      const state = this.loadState(ep);
      if (state) {
        // Started before: nothing to redo (a destination removed behind the driver's back is recreated).
        if (state.status === 'copying') await mkdir(ep.destDir, { recursive: true, mode: 0o755 });
        return;
      }
      if (!directoryExists(ep.sourceDir)) throw new DriverError(`Share ${ep.sourceName} does not exist on ${ep.sourceHost}.`);
      if (pathExists(ep.destDir) && !(directoryExists(ep.destDir) && isEmptyDirectory(ep.destDir))) {
        throw new DriverError(`Share ${ep.destName} already exists on ${ep.destHost} and is not an empty directory; it is not overwritten.`);
      }
      const plan = planSource(ep.sourceDir);
      await mkdir(ep.destRoot, { recursive: true });
      // The state first: a destination directory without state is never one this driver made.
      writeState(ep.statePath, newState(ep, plan));
      await mkdir(ep.destDir, { recursive: true, mode: 0o755 });
      await chmod(ep.destDir, 0o755);
    });
  }

  async migrationContinue(req: MigrationRequest): Promise<boolean> {
    return this.migrationStep(req, 'migration_continue', async (ep) => {
      const state = this.loadState(ep);
      if (!state) throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} has not been started.`);
      if (state.status !== 'copying') return true;
      try {
        if ((await copyPass(ep, state, sliceBudgetMs())).complete) state.status = 'phase1-done';
      } finally {
        writeState(ep.statePath, state);
      }
      return state.status !== 'copying';
    });
  }

  async migrationComplete(req: MigrationRequest): Promise<string[]> {
    return this.migrationStep(req, 'migration_complete', async (ep) => {
      const state = this.loadState(ep);
      if (!state) {
        // Completed before: the source is gone, the destination holds the share.
        if (!pathExists(ep.sourceDir) && directoryExists(ep.destDir)) return [ep.destDir];
        throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} has not been started.`);
      }
      if (state.status === 'copying') throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} cannot complete: phase 1 (the copy) is not done.`);
      if (state.status === 'phase1-done') {
        // The final sync: whatever changed on the source since it was copied, and what was removed.
        try {
          if (!(await copyPass(ep, state, Number.POSITIVE_INFINITY)).complete) throw new DriverError(`Final sync of ${ep.sourceName} did not finish.`);
          state.status = 'completed';
        } finally {
          writeState(ep.statePath, state);
        }
      }
      // The destination holds the share: its recorded size goes with it, then the source backend is
      // cleaned, as Manila expects of the driver.
      const sourceSize = await readRecordedSize(ep.sourceDir);
      if (sourceSize !== undefined && (await readRecordedSize(ep.destDir)) === undefined) await writeRecordedSize(ep.destDir, sourceSize);
      removeTree(ep.sourceDir);
      await rm(ep.sourceDir + RULES_SUFFIX, { force: true });
      await removeRecordedSize(ep.sourceDir);
      removeState(ep.statePath);
      return [ep.destDir];
    });
  }

  async migrationCancel(req: MigrationRequest): Promise<void> {
    await this.migrationStep(req, 'migration_cancel', async (ep) => {
      const state = this.loadState(ep);
      if (state) {
        if (state.status === 'completed') throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} has completed; it cannot be cancelled.`);
        removeTree(ep.destDir);
        removeState(ep.statePath);
        return;
      }
      if (!pathExists(ep.destDir)) return;
      if (!pathExists(ep.sourceDir)) throw new DriverError(`Migration of ${ep.sourceName} to ${ep.destHost} has completed (the source is gone); ${ep.destDir} is not removed.`);
      if (directoryExists(ep.destDir) && isEmptyDirectory(ep.destDir)) {
        await rm(ep.destDir, { recursive: true, force: true });
        return;
      }
      throw new DriverError(`${ep.destDir} holds data that no migration by this driver wrote; it is not removed.`);
    });
  }

  async migrationGetProgress(req: MigrationRequest): Promise<MigrationProgress> {
    return this.migrationStep(req, 'migration_get_progress', async (ep) => progressOf(this.loadState(ep)));
  }

  // ---- the size: a recorded quota (local-size.ts) -----------------------------------------------

  private async existingPath(name: string): Promise<string> {
    if (!(await this.getShare(name))) throw new DriverError(`Share ${name} does not exist on ${this.config.host}.`);
    return this.path(name);
  }

  /** Manila's extend_share: records the larger size (the same size: no change; smaller: DriverError). */
  async extendShare(name: string, newSizeGb: number): Promise<void> {
    const path = await this.existingPath(name);
    const size = await readRecordedSize(path);
    if (size === newSizeGb) return;
    if (!Number.isInteger(newSizeGb) || newSizeGb < 1 || (size !== undefined && newSizeGb < size)) {
      throw new DriverError(`Cannot extend ${name} on ${this.config.host} from ${size ?? 'an unrecorded size'} GiB to ${newSizeGb} GiB.`);
    }
    await writeRecordedSize(path, newSizeGb);
  }

  /**
   * Manila's shrink_share: below what the directory holds is ShareShrinkingPossibleDataLoss, and
   * nothing is changed (the same size: no change; larger: DriverError).
   */
  async shrinkShare(name: string, newSizeGb: number): Promise<void> {
    const path = await this.existingPath(name);
    const size = await readRecordedSize(path);
    if (size === newSizeGb) return;
    if (!Number.isInteger(newSizeGb) || newSizeGb < 1 || (size !== undefined && newSizeGb > size)) {
      throw new DriverError(`Cannot shrink ${name} on ${this.config.host} from ${size ?? 'an unrecorded size'} GiB to ${newSizeGb} GiB.`);
    }
    const used = await usedBytes(path);
    if (used > newSizeGb * GIB) {
      throw new ShareShrinkingPossibleDataLoss(`backend ${this.config.host}: ${name} holds ${used} bytes, more than ${newSizeGb} GiB: shrinking it could lose data`, {
        context: { host: this.config.host, name, usedBytes: used, sizeGb: size, newSizeGb },
      });
    }
    await writeRecordedSize(path, newSizeGb);
  }

  /** ShareSizeRestorer: the recorded size put back after a failed resize, with no data-loss check (driver.ts says why). */
  async restoreShareSize(name: string, sizeGb: number): Promise<void> {
    const path = await this.existingPath(name);
    if (!Number.isInteger(sizeGb) || sizeGb < 1) throw new DriverError(`Cannot put ${name} on ${this.config.host} back to ${sizeGb} GiB.`);
    if ((await readRecordedSize(path)) !== sizeGb) await writeRecordedSize(path, sizeGb);
  }

  /** The recorded size (0 when none is recorded) and what the directory holds; nothing blocks writes here. */
  async shareUsage(name: string): Promise<ShareUsage | undefined> {
    if (!(await this.getShare(name))) return undefined;
    const path = this.path(name);
    const sizeGb = (await readRecordedSize(path)) ?? 0;
    const used = await usedBytes(path);
    return { name, sizeGb, usedBytes: used, overQuota: sizeGb > 0 && used > sizeGb * GIB, writesBlocked: false };
  }

  async connectionGetInfo(name: string): Promise<ConnectionInfo> {
    this.path(name);
    // Manila's base driver defaults (M/share/driver.py connection_get_info).
    return { mount: 'mount -vt %(proto)s %(options)s %(export)s %(path)s', unmount: 'umount -v %(path)s', access_mapping: { ip: ['nfs'], user: ['cifs'] } };
  }
}

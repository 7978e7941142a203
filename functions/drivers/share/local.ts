/**
 * The local share driver: a share is a directory `<root>/<name>` whose absolute path is its export
 * location, so an operator can put data in and read it back. Access rules are recorded beside it
 * in `<root>/<name>.access.json`; a share whose rules are all `ro` is made read-only (mode 0555),
 * any `rw` rule (or none) makes it writable again (0755).
 *
 * Kinds: `local-a` backends support driver-assisted migration between each other
 * (migration_check_compatibility says so); `local-b` supports none. The migration steps
 * themselves are not implemented yet and throw a DriverError saying so.
 */
import { chmod, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DriverError } from '../../core/errors.js';
import type {
  BackendShare,
  ConnectionInfo,
  DriverAccessRule,
  MigrationCompatibility,
  MigrationProgress,
  MigrationRequest,
  ShareBackendConfig,
  ShareDriver,
  ShareDriverKind,
  SharePoolCapabilities,
} from './driver.js';

const NAME_RE = /^share-[0-9a-f-]{36}$/;
const RULES_SUFFIX = '.access.json';

export class LocalShareDriver implements ShareDriver {
  readonly kind: ShareDriverKind;
  constructor(private readonly config: ShareBackendConfig) {
    this.kind = config.driver;
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
    return { name: req.name, exportPath: path };
  }

  async deleteShare(name: string): Promise<void> {
    const path = this.path(name);
    // A read-only export (0555) is made writable first, so its contents can be removed by a non-root user.
    await chmod(path, 0o755).catch(() => undefined);
    await rm(path, { recursive: true, force: true });
    await rm(path + RULES_SUFFIX, { force: true });
  }

  async getShare(name: string): Promise<BackendShare | undefined> {
    const path = this.path(name);
    try {
      return (await stat(path)).isDirectory() ? { name, exportPath: path } : undefined;
    } catch {
      return undefined;
    }
  }

  async listShares(): Promise<BackendShare[]> {
    let entries;
    try {
      entries = await readdir(this.config.root, { withFileTypes: true });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new DriverError(`Backend root ${this.config.root} of ${this.config.host} does not exist.`);
      throw e;
    }
    return entries.filter((e) => e.isDirectory() && NAME_RE.test(e.name)).map((e) => ({ name: e.name, exportPath: join(this.config.root, e.name) }));
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
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
  }

  async migrationCheckCompatibility(req: MigrationRequest): Promise<MigrationCompatibility> {
    const dest = req.destination.backend;
    const compatible = this.kind === 'local-a' && dest.driver === 'local-a' && dest.host !== this.config.host && dest.protocols.includes(req.source.proto);
    return { compatible, writable: compatible, preserve_metadata: compatible, nondisruptive: false, preserve_snapshots: compatible };
  }

  private notYet(method: string): never {
    throw new DriverError(`${method} is not yet implemented by the ${this.kind} share driver (${this.config.host}).`);
  }

  async migrationStart(_req: MigrationRequest): Promise<void> {
    this.notYet('migration_start');
  }
  async migrationContinue(_req: MigrationRequest): Promise<boolean> {
    this.notYet('migration_continue');
  }
  async migrationComplete(_req: MigrationRequest): Promise<string[]> {
    this.notYet('migration_complete');
  }
  async migrationCancel(_req: MigrationRequest): Promise<void> {
    this.notYet('migration_cancel');
  }
  async migrationGetProgress(_req: MigrationRequest): Promise<MigrationProgress> {
    this.notYet('migration_get_progress');
  }

  async connectionGetInfo(name: string): Promise<ConnectionInfo> {
    this.path(name);
    // Manila's base driver defaults (M/share/driver.py connection_get_info).
    return { mount: 'mount -vt %(proto)s %(options)s %(export)s %(path)s', unmount: 'umount -v %(path)s', access_mapping: { ip: ['nfs'], user: ['cifs'] } };
  }
}

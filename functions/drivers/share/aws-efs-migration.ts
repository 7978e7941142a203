/**
 * Driver-assisted migration of the aws-efs share driver (the class AwsEfsShareDriver extends):
 * EFS replication from the share's file system to a file system of the destination backend, with
 * that backend's performance and throughput modes, subnets and region. Manila's two phases:
 *
 * - migration_start (share-migration-start's DriverStart): the destination's share is made as any
 *   share of that backend (createShare: file system under a creation token of the destination's
 *   name, its security group, its mount targets); its replication overwrite protection is turned off
 *   (it becomes read-only: a replica holds only what EFS writes); CreateReplicationConfiguration from
 *   the source to it. The source stays writable and mounted; EFS copies data and metadata.
 * - migration_continue (polled every 5 minutes: `features.migrationPoll` is `backend`): phase 1 is
 *   done once the replication is ENABLED and has a LastReplicatedTimestamp (the first full sync);
 *   ERROR or PAUSED fail it with EFS's StatusMessage. migration_get_progress: the replica's metered
 *   size against the source's until then, 100 after, with the last sync time and the lag.
 * - migration_complete (share-migration-complete's DriverComplete, phase 2; the flow has cast the
 *   share's rules read-only before, so new mounts are read-only): while the replica is more than
 *   MAX_CUTOVER_LAG_MS behind, the step waits with the source still mounted. Then the
 *   read-only cast: a Deny of ClientWrite to everyone in the file system policy (new mounts are
 *   read-only), then the source's mount targets are removed (EFS evaluates the policy when a client
 *   connects: a client mounted before it could still write; without a mount target nobody can), and
 *   the moment they are gone is recorded on the source (`ferry:migration-cast-at`). Then it waits
 *   until the replica's LastReplicatedTimestamp is after that moment (everything written before the
 *   cast is on it), records the cut-over on the source (`ferry:migration-cutover`), deletes the
 *   replication (the replica becomes writable) and waits for that, makes sure the destination's mount
 *   targets are there, and retires the source (deleteShare). The share's access rules go onto the
 *   destination's own security group and policy in the migration's next step (apply-rules, as
 *   Manila's share manager applies them after migration_complete). Returns the destination's export.
 * - migration_cancel: deletes the replication and waits until it is gone, deletes the replica (its
 *   share), lifts a cast (policy, mount targets back, the mark removed). Refused after the cut-over.
 *
 * Every effect is found again before it is made (the replication by its source, the replica by its
 * creation token, the cast and cut-over by the source's tags), and every wait is BackendNotReady,
 * which the machine's Task retries after a wait (infra/asl/policy.ts): no function sleeps.
 */
import type { FileSystemDescription, ReplicationConfigurationDescription } from '@aws-sdk/client-efs';
import { BackendNotReady, ConfigurationError } from '../../core/errors.js';
import type { BackendShare, MigrationCompatibility, MigrationProgress, MigrationRequest, ShareBackendConfig, ShareDriverFeatures, ShareReplication } from './driver.js';
import { fileSystemRefOf, readPolicy, withReadOnlyCast } from './aws-efs-access.js';
import { EfsBackend } from './aws-efs-backend.js';
import { REPLICATION_NOT_FOUND, TAG_BACKEND, TAG_MIGRATION_CAST, TAG_MIGRATION_CUTOVER, TAG_SHARE_NAME, efsSdk, exportLocationOf, tagOf } from './aws-efs-sdk.js';

/** How far behind the replica may be when phase 2 casts the source read-only (EFS's RPO for most file systems is 15 minutes). */
export const MAX_CUTOVER_LAG_MS = 15 * 60_000;
/** The replica's last sync must be this much after the cast: the function's clock against EFS's (both NTP-synchronized). */
export const CLOCK_MARGIN_MS = 1_000;

const FEATURES: ShareDriverFeatures = {
  driverAssistedMigrationTo: ['aws-efs'],
  // Writable during phase 1, metadata replicated; the export changes (nondisruptive no); EFS has no
  // share snapshots and replication carries no AWS Backup recovery point (preserve_snapshots no).
  migrationKeeps: { writable: true, preserveMetadata: true, nondisruptive: false, preserveSnapshots: false },
  migrationPoll: 'backend',
};
const FAILED = new Set(['ERROR', 'PAUSED', 'PAUSING']);

export abstract class EfsMigrationBackend extends EfsBackend {
  readonly features = FEATURES;

  abstract createShare(req: { name: string; sizeGb: number; proto: string; pool: string }): Promise<BackendShare>;
  abstract deleteShare(name: string): Promise<void>;
  /** The driver of another aws-efs backend (a migration's destination). */
  protected abstract peer(config: ShareBackendConfig): EfsMigrationBackend;

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  private compatible(req: MigrationRequest): boolean {
    const b = req.destination.backend;
    return b.driver === 'aws-efs' && b.host !== this.backendHost && b.protocols.includes(req.source.proto);
  }

  async migrationCheckCompatibility(req: MigrationRequest): Promise<MigrationCompatibility> {
    const ok = this.compatible(req);
    const k = FEATURES.migrationKeeps;
    return { compatible: ok, writable: ok && k.writable, preserve_metadata: ok && k.preserveMetadata, nondisruptive: ok && k.nondisruptive, preserve_snapshots: ok && k.preserveSnapshots };
  }

  /** Both names and the destination checked; the destination backend's driver. */
  private destinationOf(req: MigrationRequest): EfsMigrationBackend {
    this.checkName(req.source.name);
    this.checkName(req.destination.name);
    if (!this.compatible(req)) throw this.fail(`no driver-assisted migration of ${req.source.name} to ${req.destination.host}: another aws-efs backend exporting ${req.source.proto} is needed`, { destination: req.destination.host });
    try {
      return this.peer(req.destination.backend);
    } catch (e) {
      if (e instanceof ConfigurationError) throw this.fail(e.message, { destination: req.destination.host }, e);
      throw e;
    }
  }

  /** The replication whose source is this file system (undefined: none, or it is only another one's destination). */
  protected async replicationOf(fileSystemId: string): Promise<ReplicationConfigurationDescription | undefined> {
    const out = await this.send(
      'DescribeReplicationConfigurations',
      { fileSystemId },
      async () => (await this.efs()).send(new (await efsSdk()).DescribeReplicationConfigurationsCommand({ FileSystemId: fileSystemId })),
      [REPLICATION_NOT_FOUND],
    );
    return out?.Replications?.find((r) => r.SourceFileSystemId === fileSystemId);
  }

  /** The replication of the source and its one destination, which must be this migration's replica (when there is one). */
  private async replicationTo(source: FileSystemDescription, replica: FileSystemDescription | undefined, name: string) {
    const replication = await this.replicationOf(source.FileSystemId!);
    const target = replication?.Destinations?.[0];
    if (replication && target?.FileSystemId !== replica?.FileSystemId) {
      throw this.fail(`${name} (${source.FileSystemId}) replicates to ${target?.FileSystemId}, not to this migration's destination ${replica?.FileSystemId ?? '(none)'}`, { name });
    }
    return replication && target ? { status: target.Status ?? 'ENABLING', synced: target.LastReplicatedTimestamp?.getTime(), message: target.StatusMessage } : undefined;
  }

  private refuseFailed(r: { status: string; message?: string }, name: string): void {
    if (FAILED.has(r.status)) throw this.fail(`the EFS replication of ${name} is ${r.status}: ${r.message ?? 'no reason given'}`, { name, status: r.status });
  }

  /** Called by DriverStart: the replica made and the replication created, once. */
  async migrationStart(req: MigrationRequest): Promise<void> {
    const dest = this.destinationOf(req);
    const name = req.source.name;
    const source = await this.availableFileSystemOf(name);
    if (tagOf(source, TAG_MIGRATION_CUTOVER)) throw this.fail(`${name} is cut over to ${tagOf(source, TAG_MIGRATION_CUTOVER)} already: its migration cannot start again`, { name });
    const pool = req.destination.host.split('#')[1] ?? dest.config.pools[0]!.name;
    await dest.createShare({ name: req.destination.name, sizeGb: req.source.sizeGb, proto: req.source.proto, pool });
    const replica = (await dest.availableFileSystemOf(req.destination.name)) as FileSystemDescription;
    const existing = await this.replicationTo(source, replica, name);
    if (existing) {
      if (existing.status === 'DELETING') throw this.notReady(`an earlier replication of ${name} is still being deleted`, { name });
      return;
    }
    const replicaId = replica.FileSystemId!;
    // A file system is protected from being a replication's destination until that is turned off (it then holds only what EFS writes).
    if (replica.FileSystemProtection?.ReplicationOverwriteProtection === 'ENABLED') {
      await dest.send('UpdateFileSystemProtection', { name: req.destination.name, fileSystemId: replicaId }, async () =>
        (await dest.efs()).send(new (await efsSdk()).UpdateFileSystemProtectionCommand({ FileSystemId: replicaId, ReplicationOverwriteProtection: 'DISABLED' })),
      );
    }
    try {
      await this.attempt('CreateReplicationConfiguration', { name, replica: replicaId }, async () =>
        (await this.efs()).send(new (await efsSdk()).CreateReplicationConfigurationCommand({ SourceFileSystemId: source.FileSystemId, Destinations: [{ Region: dest.config.region, FileSystemId: replicaId }] })),
      );
    } catch (e) {
      if (e instanceof BackendNotReady) throw e;
      // A lost reply or a racing start: the replication is there all the same.
      if (await this.replicationTo(source, replica, name)) return;
      throw this.awsFail('CreateReplicationConfiguration', e, { name, replica: replicaId });
    }
  }

  /** Called by DriverContinue: true once the replica has had its first full sync. */
  async migrationContinue(req: MigrationRequest): Promise<boolean> {
    const dest = this.destinationOf(req);
    const name = req.source.name;
    const source = await this.liveFileSystemOf(name);
    if (!source) throw this.fail(`share ${name} does not exist`, { name });
    const replication = await this.replicationTo(source, await dest.liveFileSystemOf(req.destination.name), name);
    if (!replication) {
      if (tagOf(source, TAG_MIGRATION_CUTOVER)) return true;
      throw this.fail(`no migration of ${name} was started (it has no replication)`, { name });
    }
    this.refuseFailed(replication, name);
    if (replication.status === 'DELETING') throw this.fail(`the replication of ${name} is being deleted (cancelled?)`, { name });
    return replication.status === 'ENABLED' && replication.synced !== undefined;
  }

  async migrationGetProgress(req: MigrationRequest): Promise<MigrationProgress> {
    const dest = this.destinationOf(req);
    const source = await this.liveFileSystemOf(req.source.name);
    const replica = await dest.liveFileSystemOf(req.destination.name);
    const replication = source && (await this.replicationTo(source, replica, req.source.name));
    if (!source || !replication) return { total_progress: 0 };
    const total = source.SizeInBytes?.Value ?? 0;
    const details = { bytes_total: total, replication_status: replication.status, ...(replication.message ? { replication_message: replication.message } : {}) };
    if (replication.status === 'ENABLED' && replication.synced !== undefined) {
      const synced = replication.synced;
      return { total_progress: 100, bytes_done: total, ...details, last_replicated_at: new Date(synced).toISOString(), lag_seconds: Math.max(0, Math.round((this.now() - synced) / 1000)) };
    }
    // The first sync: the replica's metered size against the source's (EFS meters both from time to time).
    const done = Math.min(total, replica?.SizeInBytes?.Value ?? 0);
    return { total_progress: total > 0 ? Math.min(99, Math.floor((done * 100) / total)) : 0, bytes_done: done, ...details };
  }

  /** Called by DriverComplete: the cast, the final sync, the cut-over, the source retired; the destination's export. */
  async migrationComplete(req: MigrationRequest): Promise<string[]> {
    const dest = this.destinationOf(req);
    const [name, destName] = [req.source.name, req.destination.name];
    let replica = await dest.liveFileSystemOf(destName);
    if (!replica) throw this.fail(`the destination ${destName} of ${name} does not exist: its migration did not start`, { name });
    const source = await this.liveFileSystemOf(name);
    if (!source) {
      // A retried complete after the source was retired: the writable replica is the share.
      if (replica.FileSystemProtection?.ReplicationOverwriteProtection !== 'ENABLED') throw this.fail(`${name} is gone but its replica ${destName} is not writable`, { name });
      return [exportLocationOf(replica.FileSystemId!, dest.config.region)];
    }
    const sourceId = source.FileSystemId!;
    const replication = await this.replicationTo(source, replica, name);
    if (replication && !tagOf(source, TAG_MIGRATION_CUTOVER)) {
      this.refuseFailed(replication, name);
      if (replication.status !== 'ENABLED' || replication.synced === undefined) throw this.fail(`phase 1 of ${name} is not done (the replica's first sync has not finished)`, { name });
      const castAt = await this.castReadOnly(source, replication.synced, name);
      const after = castAt + CLOCK_MARGIN_MS;
      await this.poll(`the replica of ${name} has not yet everything written before the read-only cast at ${new Date(castAt).toISOString()}`, { name }, () => this.replicationTo(source, replica, name), (r) => {
        if (r) this.refuseFailed(r, name);
        return r?.synced !== undefined && r.synced > after;
      });
      await this.tagFileSystem(sourceId, { [TAG_MIGRATION_CUTOVER]: replica.FileSystemId! }, name);
    } else if (!replication && tagOf(source, TAG_MIGRATION_CUTOVER) !== replica.FileSystemId) {
      throw this.fail(`${name} has no replication to ${destName}: phase 1 did not run, or the replication was deleted outside Ferry`, { name });
    }
    if (replication) await this.deleteReplication(sourceId, replication.status, name);
    replica = await dest.poll(`the replica ${destName} of ${name} is not writable yet`, { name }, () => dest.fileSystemById(replica!.FileSystemId!), (fs) => fs?.FileSystemProtection?.ReplicationOverwriteProtection === 'ENABLED');
    const moved = await dest.createShare({ name: destName, sizeGb: req.source.sizeGb, proto: req.source.proto, pool: req.destination.host.split('#')[1] ?? dest.config.pools[0]!.name });
    await this.deleteShare(name);
    return [moved.exportLocation];
  }

  /**
   * The read-only cast of phase 2 (see the module comment): once, while the replica is close behind;
   * answers the time it was complete (the source's mark). A retry finds the mark, or redoes the steps
   * (each idempotent) and records a later time, which only makes the final wait longer.
   */
  private async castReadOnly(source: FileSystemDescription, synced: number, name: string): Promise<number> {
    const marked = tagOf(source, TAG_MIGRATION_CAST);
    if (marked) return Date.parse(marked);
    const behind = this.now() - synced;
    if (behind > MAX_CUTOVER_LAG_MS) {
      throw this.notReady(`the replica of ${name} is ${Math.round(behind / 60_000)} minutes behind; the source keeps its mount targets until it is within ${MAX_CUTOVER_LAG_MS / 60_000}`, { name });
    }
    const id = source.FileSystemId!;
    const current = await this.policyOf(id);
    await this.putPolicy(id, current, withReadOnlyCast(current, fileSystemRefOf(source.FileSystemArn!), true), name);
    await this.removeMountTargets(id, name);
    const castAt = this.now();
    await this.tagFileSystem(id, { [TAG_MIGRATION_CAST]: new Date(castAt).toISOString() }, name);
    return castAt;
  }

  /** DeleteReplicationConfiguration unless it is going already, then looks until it is gone (BackendNotReady meanwhile). */
  private async deleteReplication(sourceId: string, status: string, name: string): Promise<void> {
    if (status !== 'DELETING') {
      await this.send(
        'DeleteReplicationConfiguration',
        { name, fileSystemId: sourceId },
        async () => (await this.efs()).send(new (await efsSdk()).DeleteReplicationConfigurationCommand({ SourceFileSystemId: sourceId })),
        [REPLICATION_NOT_FOUND],
      );
    }
    await this.poll(`the replication of ${name} is being deleted`, { name }, () => this.replicationOf(sourceId), (r) => r === undefined);
  }

  /**
   * For the audit (functions/audit/share-backends.ts): the replications whose source is one of this
   * backend's shares, each with its replica's share when the replica is Ferry's. One
   * DescribeReplicationConfigurations per share, by its id (what IAM scopes to Ferry's file systems).
   */
  async shareReplications(): Promise<ShareReplication[]> {
    const out: ShareReplication[] = [];
    for (const fs of await this.backendFileSystems()) {
      const replication = await this.replicationOf(fs.FileSystemId!);
      const d = replication?.Destinations?.[0];
      if (!replication || !d?.FileSystemId) continue;
      const region = d.Region ?? this.config.region;
      // The replica read in its own region, with that region's clients.
      const reader = region === this.config.region ? this : this.peer({ ...this.config, region } as ShareBackendConfig);
      const replica = await reader.fileSystemById(d.FileSystemId);
      const host = replica && tagOf(replica, TAG_BACKEND);
      const name = replica && tagOf(replica, TAG_SHARE_NAME);
      out.push({
        name: tagOf(fs, TAG_SHARE_NAME)!,
        sourceId: fs.FileSystemId!,
        replica: { id: d.FileSystemId, region, ...(host && name ? { host, name } : {}) },
        status: d.Status ?? 'ENABLING',
        ...(replication.CreationTime ? { createdAt: replication.CreationTime.toISOString() } : {}),
      });
    }
    return out;
  }

  /** The audit's repair of a replication no migration holds: deleted (none is success), looked at until gone (BackendNotReady meanwhile). */
  async deleteShareReplication(name: string): Promise<void> {
    this.checkName(name);
    const source = await this.liveFileSystemOf(name);
    if (!source) return;
    const replication = await this.replicationOf(source.FileSystemId!);
    if (replication) await this.deleteReplication(source.FileSystemId!, replication.Destinations?.[0]?.Status ?? 'ENABLED', name);
  }

  /** Called by the migration's cleanup: the replication and the replica removed, a cast lifted; nothing started is fine. */
  async migrationCancel(req: MigrationRequest): Promise<void> {
    const dest = this.destinationOf(req);
    const name = req.source.name;
    const replica = await dest.liveFileSystemOf(req.destination.name);
    const source = await this.liveFileSystemOf(name);
    if (!source) {
      if (replica) throw this.fail(`the migration of ${name} to ${req.destination.name} is complete: it cannot be cancelled`, { name });
      return;
    }
    if (tagOf(source, TAG_MIGRATION_CUTOVER)) throw this.fail(`the migration of ${name} has cut over to ${tagOf(source, TAG_MIGRATION_CUTOVER)}: it can no longer be cancelled`, { name });
    const replication = await this.replicationTo(source, replica, name);
    if (replication) await this.deleteReplication(source.FileSystemId!, replication.status, name);
    await dest.deleteShare(req.destination.name);
    // The source whole again: its policy without the cast, its mount targets back, the mark removed last.
    const id = source.FileSystemId!;
    const current = await this.policyOf(id);
    if (readPolicy(current).castReadOnly) await this.putPolicy(id, current, withReadOnlyCast(current, fileSystemRefOf(source.FileSystemArn!), false), name);
    if (tagOf(source, TAG_MIGRATION_CAST)) {
      await this.ensureMountTargets(id, await this.ensureSecurityGroup(name), name);
      await this.untagFileSystem(id, [TAG_MIGRATION_CAST], name);
    }
  }
}

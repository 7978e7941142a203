/**
 * The replication schedule of backends whose driver replicates by passes that never wait (aws-ebs:
 * snapshot, copy to each target region, prune; functions/drivers/volume/aws-ebs-replication.ts).
 * On AWS an EventBridge rule runs it every few minutes (wiring `replication-pass`); each run moves
 * every replicated volume one step, so a slow snapshot or copy is simply looked at again next time.
 *
 * The service state decides, as for the local stack's loop (infra/local/replicator.ts): only a
 * backend `enabled` on its primary replicates; a failover or failback in progress, a failed-over
 * backend and a frozen one (seed 001: freeze stops the schedule, thaw resumes it) are skipped.
 * Local backends are the local stack's loop's, not this one's.
 */
import { DependencyError } from '../core/errors.js';
import { logger } from '../core/logger.js';
import type { BackendConfig, BackendServiceState } from '../drivers/volume/driver.js';
import { driverFor } from '../drivers/volume/registry.js';
import type { BackendLag } from '../drivers/volume/replication-lag.js';
import { listBackendRecords, recordReplicationLag } from '../volumes/backends.js';

/** A driver whose replication is a pass the schedule runs (aws-ebs). */
interface PassDriver {
  syncNow(): Promise<{ skipped?: string; volumes: number; errors: { backendName: string; message: string }[]; lag?: BackendLag }>;
}

export interface PassOutcome {
  host: string;
  /** Why the backend was not replicated this run, if it was not. */
  skipped?: string;
  volumes: number;
  errors: { backendName: string; message: string }[];
}

/** Whether the schedule replicates this backend now, and if not, why. */
export function passDecision(config: BackendConfig, service: BackendServiceState): { run: true } | { run: false; why: string } {
  if (config.driver === 'local' || !config.replicationDevices?.length) return { run: false, why: 'not replicated by the schedule' };
  if (service.activeBackendId) return { run: false, why: `failed over to ${service.activeBackendId}` };
  if (service.frozen) return { run: false, why: 'frozen' };
  if (service.replicationStatus !== 'enabled') return { run: false, why: `replication ${service.replicationStatus}` };
  return { run: true };
}

export async function runReplicationPasses(): Promise<PassOutcome[]> {
  const out: PassOutcome[] = [];
  for (const { config, service } of await listBackendRecords()) {
    const decision = passDecision(config, service);
    if (!decision.run) {
      if (config.driver !== 'local' && config.replicationDevices?.length) out.push({ host: config.host, skipped: decision.why, volumes: 0, errors: [] });
      continue;
    }
    const driver = driverFor(config, '') as unknown as Partial<PassDriver>;
    if (typeof driver.syncNow !== 'function') {
      out.push({ host: config.host, skipped: `driver ${config.driver} has no replication pass`, volumes: 0, errors: [] });
      continue;
    }
    try {
      const report = await driver.syncNow();
      // What `cinder get-pools --detail` shows as replication_lag.
      if (report.lag) await recordReplicationLag(config.host, report.lag);
      out.push({ host: config.host, ...(report.skipped ? { skipped: report.skipped } : {}), volumes: report.volumes, errors: report.errors });
    } catch (e) {
      logger.error('replication pass failed', { host: config.host, error: e as Error });
      out.push({ host: config.host, volumes: 0, errors: [{ backendName: '*', message: (e as Error).message }] });
    }
  }
  return out;
}

/** Scheduled by EventBridge on AWS (infra/aws): one run over every backend; throws when a volume failed, so the function's error alarm shows it. */
export async function handler(): Promise<{ backends: number; volumes: number }> {
  const outcomes = await runReplicationPasses();
  for (const o of outcomes) logger.info('replication pass', { ...o });
  const errors = outcomes.flatMap((o) => o.errors.map((e) => `${o.host} ${e.backendName}: ${e.message}`));
  if (errors.length > 0) throw new DependencyError(`${errors.length} volume(s) did not replicate this run (the next run tries again): ${errors.slice(0, 5).join('; ')}`);
  return { backends: outcomes.filter((o) => !o.skipped).length, volumes: outcomes.reduce((n, o) => n + o.volumes, 0) };
}

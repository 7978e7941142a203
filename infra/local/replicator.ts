/**
 * The local stack's replication loop: a pass of the local replication engine for every replicated
 * local backend, on an interval. On AWS there is no such loop (a replicated AWS backend replicates
 * by itself); the loop belongs to the embedded stack, which starts it (stack.ts).
 */
import { ConfigurationError } from '../../functions/core/errors.js';
import { logger } from '../../functions/core/logger.js';
import type { BackendConfig } from '../../functions/drivers/volume/driver.js';
import { replicationEngineFor } from '../../functions/drivers/volume/local-replication.js';
import { PRIMARY_BACKEND_ID } from '../../functions/drivers/volume/local-sites.js';
import { worthRecording, type BackendLag } from '../../functions/drivers/volume/replication-lag.js';

export const DEFAULT_REPLICATION_INTERVAL_MS = 1000;
export const REPLICATION_INTERVAL_ENV = 'FERRY_REPLICATION_INTERVAL_MS';

export function replicationIntervalFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[REPLICATION_INTERVAL_ENV];
  if (raw === undefined || raw === '') return DEFAULT_REPLICATION_INTERVAL_MS;
  const ms = Number(raw);
  if (!Number.isFinite(ms) || ms <= 0) throw new ConfigurationError(`${REPLICATION_INTERVAL_ENV} must be a positive number of milliseconds, got ${JSON.stringify(raw)}`);
  return ms;
}

export interface ReplicationLoop {
  /** Stops scheduling passes and waits for the running one. */
  stop(): Promise<void>;
}

/** A backend as the loop sees it: its config and its service state (reference §2.3). */
export interface ReplicatedBackend {
  config: BackendConfig;
  activeBackendId: string;
  /** The service's replication_status; when given, only `enabled` (on the primary) replicates. */
  replicationStatus?: string;
}

/** What a loop tick does for a backend (see startReplicationLoop). */
export function replicationDecision(backend: ReplicatedBackend): 'skip' | 'sync' | 'sync-clearing-stale-promotion' {
  const { config, activeBackendId, replicationStatus } = backend;
  if (config.driver !== 'local' || !config.replicationDevices?.length) return 'skip';
  if (activeBackendId !== PRIMARY_BACKEND_ID) return 'skip';
  if (replicationStatus === undefined) return 'sync';
  return replicationStatus === 'enabled' ? 'sync-clearing-stale-promotion' : 'skip';
}

/**
 * Runs a pass for every replicated local backend every `intervalMs`. `backends` is asked on every
 * tick, so backends added, failed over or failed back while the stack runs are followed. The next
 * tick is scheduled only when this one is done: ticks never overlap.
 *
 * The service state is the authority: `failing-over` (a failover or failback in progress, batch by
 * batch), `failed-over` and `failover-error` all stop replication. Once the service is `enabled` on
 * the primary again, a target's leftover promoted marker (a failback with no volume left to bring
 * home, a failover refused after its target was picked) is stale and removed.
 */
export function startReplicationLoop(options: {
  backends: () => Promise<ReplicatedBackend[]>;
  intervalMs?: number;
  /** Where each pass's lag goes (the stack: the backend item, which `cinder get-pools --detail` shows). */
  recordLag?: (host: string, lag: BackendLag) => Promise<unknown>;
}): ReplicationLoop {
  const intervalMs = options.intervalMs ?? replicationIntervalFromEnv();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> = Promise.resolve();
  let listFailure: string | undefined;
  // The lag last written per backend: a pass every second writes only when it changed (worthRecording).
  const recorded = new Map<string, BackendLag>();

  const tick = async () => {
    let backends: ReplicatedBackend[];
    try {
      backends = await options.backends();
      listFailure = undefined;
    } catch (e) {
      if (listFailure !== (e as Error).message) logger.warn('replication: cannot list the backends', { error: e as Error });
      listFailure = (e as Error).message;
      return;
    }
    for (const backend of backends) {
      if (stopped) return;
      const decision = replicationDecision(backend);
      if (decision === 'skip') continue;
      const { config } = backend;
      try {
        const engine = replicationEngineFor(config);
        // A failover, drill or test's syncNow holds the backend: leave it to them this tick.
        if (engine.busy()) continue;
        const report = await engine.syncAll(PRIMARY_BACKEND_ID, { promotionIsStale: decision === 'sync-clearing-stale-promotion' });
        if (report.lag && options.recordLag && worthRecording(recorded.get(config.host), report.lag)) {
          await options.recordLag(config.host, report.lag);
          recorded.set(config.host, report.lag);
        }
      } catch (e) {
        logger.warn('replication pass failed', { host: config.host, error: e as Error });
      }
    }
  };
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick().finally(schedule);
    }, intervalMs);
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}

/**
 * The replication schedule of backends whose driver replicates by passes that never wait (aws-ebs:
 * snapshot, copy to each target region, prune; functions/drivers/volume/aws-ebs-replication.ts),
 * as the step handler `replication-pass-steps` of two machines:
 *
 * - replication-schedule (statemachines/replication-schedule.asl.json), started every few minutes
 *   (EventBridge Scheduler on AWS, infra/aws/replication-schedule.ts): `start-passes` starts one
 *   replication-pass execution per replicated backend, named by the backend and the scheduled
 *   time, so a schedule delivered twice starts each pass once, and a backend added later by
 *   `ferry inventory apply` is in the next round with no change to the stack.
 * - replication-pass (statemachines/replication-pass.asl.json), input `{"backend": host}`:
 *   `decide` takes the backend's pass lease (pass-lease.ts: one pass per backend at a time) or
 *   ends with the reason; `page` moves one page of the backend's replicated volumes one step each
 *   and returns the next page's token, the lag tally carried in the execution's state; `finish`
 *   records the lag (what `cinder get-pools --detail` shows) and gives the lease back; `failed`
 *   (the Catch) gives it back too.
 *
 * The service state decides, as for the local stack's loop (infra/local/replicator.ts): only a
 * backend `enabled` on its primary replicates; a failover or failback in progress, a failed-over
 * backend and a frozen one are skipped, at the first step and again at every page, so a freeze
 * during a long pass stops it at the next page (seed 001: freeze stops the schedule, thaw resumes
 * it). Local backends are the local stack's loop's, not this one's.
 */
import { createHash } from 'node:crypto';
import { BadRequest, reasonOf, type CaughtError } from '../core/errors.js';
import { executionName, startExecution } from '../core/executions.js';
import { logger } from '../core/logger.js';
import type { BackendConfig, BackendServiceState } from '../drivers/volume/driver.js';
import { driverFor } from '../drivers/volume/registry.js';
import { LagTally, type TargetLag } from '../drivers/volume/replication-lag.js';
import { getBackendRecord, listBackendRecords, recordReplicationLag } from '../volumes/backends.js';
import { PassLeaseLost, releasePassLease, takePassLease } from './pass-lease.js';
import { PASS_PAGE_VOLUMES } from './pass-page.js';
/** How many volumes' failures a pass carries in its state to report (the count is exact). */
const FAILURE_SAMPLES = 5;

/** A driver whose replication is a pass of pages the schedule runs (aws-ebs). */
interface PagedPassDriver {
  passSkipped(): string | undefined;
  syncPage(page: { pageToken?: string; maxVolumes?: number; tally: LagTally }): Promise<{ volumes: number; errors: { backendName: string; message: string }[]; nextToken?: string }>;
}

/** What a pass carries from step to step (the machine's `$.pass`). */
export interface PassState {
  run: boolean;
  /** Why it ended without (more) replicating. */
  why?: string;
  volumes: number;
  failed: number;
  failures: string[];
  /** The lag tally over the pages done so far. */
  tally: TargetLag[];
  /** The next page's token; absent after the last page. */
  nextToken?: string;
}

/** Whether the schedule replicates this backend now, and if not, why. */
export function passDecision(config: BackendConfig, service: BackendServiceState): { run: true } | { run: false; why: string } {
  if (config.driver === 'local' || !config.replicationDevices?.length) return { run: false, why: 'not replicated by the schedule' };
  if (service.activeBackendId) return { run: false, why: `failed over to ${service.activeBackendId}` };
  if (service.frozen) return { run: false, why: 'frozen' };
  if (service.replicationStatus !== 'enabled') return { run: false, why: `replication ${service.replicationStatus}` };
  return { run: true };
}

/** The backend's pass driver, or why it has no pass now (the service state, then the driver's own view). */
async function passDriverOf(host: string): Promise<{ driver: PagedPassDriver; targets: string[] } | { why: string }> {
  const { config, service } = await getBackendRecord(host);
  const decision = passDecision(config, service);
  if (!decision.run) return { why: decision.why };
  const driver = driverFor(config, '') as unknown as Partial<PagedPassDriver>;
  if (typeof driver.syncPage !== 'function' || typeof driver.passSkipped !== 'function') return { why: `driver ${config.driver} has no replication pass` };
  const skipped = driver.passSkipped();
  return skipped ? { why: skipped } : { driver: driver as PagedPassDriver, targets: (config.replicationDevices ?? []).map((d) => d.backend_id) };
}

const ended = (why: string): PassState => ({ run: false, why, volumes: 0, failed: 0, failures: [], tally: [] });

/** First step: the backend replicates now and this execution holds its lease, or the pass ends with the reason. NotFound for a backend that does not exist. */
export async function decide(host: string, execution: string, now = Date.now()): Promise<PassState> {
  const found = await passDriverOf(host);
  if ('why' in found) return ended(found.why);
  const lease = await takePassLease(host, execution, now);
  if (!lease.taken) return ended(lease.heldBy ? `another pass (${lease.heldBy.holder}) is replicating ${host}` : `backend ${host} is gone`);
  return { run: true, volumes: 0, failed: 0, failures: [], tally: [] };
}

/** One page: the lease renewed, the decision checked again (a freeze meanwhile ends the pass here), the page's volumes moved one step each. */
export async function page(host: string, execution: string, state: PassState, now = Date.now()): Promise<PassState> {
  const found = await passDriverOf(host);
  if ('why' in found) return { ...state, run: false, why: found.why, nextToken: undefined };
  const lease = await takePassLease(host, execution, now);
  if (!lease.taken) throw new PassLeaseLost(`the replication pass ${execution} of ${host} lost its lease${lease.heldBy ? ` to ${lease.heldBy.holder}` : ''}; that pass carries on`, { host, execution });
  const tally = new LagTally(found.targets, state.tally);
  const out = await found.driver.syncPage({ pageToken: state.nextToken, maxVolumes: PASS_PAGE_VOLUMES, tally });
  const failures = [...state.failures, ...out.errors.map((e) => `${e.backendName}: ${e.message}`)].slice(0, FAILURE_SAMPLES);
  return {
    run: true,
    volumes: state.volumes + out.volumes,
    failed: state.failed + out.errors.length,
    failures,
    tally: tally.summary(now).targets,
    ...(out.nextToken ? { nextToken: out.nextToken } : {}),
  };
}

/** Last step: the lag of the whole pass recorded (the newest measurement wins, recordReplicationLag), the lease given back. */
export async function finish(host: string, execution: string, state: PassState, now = Date.now()): Promise<PassState> {
  if (state.tally.length > 0) await recordReplicationLag(host, { at: now, targets: state.tally });
  await releasePassLease(host, execution);
  logger.info('replication pass', { host, execution, volumes: state.volumes, failed: state.failed, ...(state.why ? { ended: state.why } : {}) });
  return state;
}

/** The Catch: the lease given back (the next pass need not wait for it to run out); the error is the execution's. */
export async function failed(host: string, execution: string, error: CaughtError | undefined): Promise<{ released: boolean }> {
  const released = await releasePassLease(host, execution);
  logger.error('replication pass failed', { host, execution, reason: reasonOf(error) });
  return { released };
}

/**
 * The name of a backend's pass for one scheduled time: the host made a name (with a hash of it, so
 * `a@b` and `a-b` differ) and the minute, so a schedule delivered twice starts one pass.
 */
export function passExecutionName(host: string, scheduledAt: Date): string {
  const minute = scheduledAt.toISOString().slice(0, 16).replace(/[-:]/g, '');
  const hash = createHash('sha256').update(host).digest('hex').slice(0, 8);
  return executionName(host.slice(0, 50), `${hash}-${minute}`);
}

/** The fan-out: one replication-pass execution per replicated backend that is not local (the pass's first step decides the rest, so a frozen backend's pass ends at once). */
export async function startPasses(scheduledAt: Date): Promise<{ started: string[] }> {
  const started: string[] = [];
  for (const { config } of await listBackendRecords()) {
    if (config.driver === 'local' || !config.replicationDevices?.length) continue;
    const name = passExecutionName(config.host, scheduledAt);
    await startExecution('replication-pass', name, { backend: config.host });
    started.push(name);
  }
  return { started };
}

export interface PassStepInput {
  step: string;
  backend?: string;
  execution?: string;
  pass?: PassState;
  error?: CaughtError;
  /** start-passes: the machine's input, `{scheduledTime}` from the schedule (EventBridge Scheduler's <aws.scheduler.scheduled-time>) or `{}` from a console start. */
  input?: { scheduledTime?: string };
  /** start-passes: the execution's start, the time a console start's passes are named by. */
  startedAt?: string;
}

function need<K extends keyof PassStepInput>(input: PassStepInput, key: K): NonNullable<PassStepInput[K]> {
  const value = input[key];
  if (value === undefined || value === null || value === '') throw new BadRequest(`replication pass step ${input.step} needs ${key} (the machine's input is {"backend": "<host@backend>"})`);
  return value as NonNullable<PassStepInput[K]>;
}

export async function handler(input: PassStepInput): Promise<unknown> {
  switch (input.step) {
    case 'decide':
      return decide(need(input, 'backend'), need(input, 'execution'));
    case 'page':
      return page(need(input, 'backend'), need(input, 'execution'), need(input, 'pass'));
    case 'finish':
      return finish(need(input, 'backend'), need(input, 'execution'), need(input, 'pass'));
    case 'failed':
      return failed(need(input, 'backend'), need(input, 'execution'), input.error);
    case 'start-passes': {
      const scheduledTime = input.input?.scheduledTime;
      const at = new Date(scheduledTime ?? need(input, 'startedAt'));
      if (Number.isNaN(at.getTime())) throw new BadRequest(`start-passes: scheduledTime ${JSON.stringify(scheduledTime)} is not a time (ISO 8601, as EventBridge Scheduler sends it)`);
      return startPasses(at);
    }
    default:
      throw new BadRequest(`unknown replication pass step ${JSON.stringify(input.step)}`);
  }
}

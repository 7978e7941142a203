/**
 * The one retry, catch and timeout policy of Ferry's state machines. The ASL files in
 * statemachines/ stay what CDK deploys and what the local interpreter runs; this module says what
 * their Retry, Catch and TimeoutSeconds fields must be, `npm run asl:policy` writes it into them
 * (infra/asl/write-policy.ts), and test/infra/asl.test.ts fails when a file drifts from it.
 *
 * - Every Task has exactly one retrier, one of RETRIERS. A machine names the retrier of its
 *   Lambda Tasks (`retrier`) and the Tasks that take another one (`tasks`); a Task running the
 *   copy worker (ecs:runTask.sync) always takes `copyTaskLaunch` and COPY_TASK_TIMEOUT_SECONDS.
 * - Every Lambda Task has its own TimeoutSeconds (the step's budget), at most its function's
 *   timeout plus LAMBDA_INVOKE_MARGIN_SECONDS: past that the function has already stopped.
 * - A Catch has one catcher: every error, into `$.error` (where the compensation step reads it),
 *   or `$.rollbackError` from a compensation.
 * - Every machine has an overall TimeoutSeconds, at least the longest a legitimate run can take
 *   with every Task at its timeout on every retry (infra/asl/check.ts worstCaseSeconds). An
 *   execution that hits it stops WITHOUT running any Catch, so no compensation runs: the overall
 *   timeout is a backstop against a wedged execution, never a way for an operation to end.
 */
import type { StateMachineName } from '../../functions/core/machines.js';
import { FAILOVER_BATCH_SIZE } from '../../functions/replication/failover-batch.js';
import { PASS_PAGE_VOLUMES } from '../../functions/replication/pass-page.js';

/** One ASL retrier, as it appears in a Task's `Retry`. */
export interface Retrier {
  readonly ErrorEquals: readonly string[];
  readonly IntervalSeconds: number;
  readonly MaxAttempts: number;
  readonly BackoffRate: number;
}

/**
 * Errors that say "try again, nothing was decided": DynamoDB throttles and transaction conflicts,
 * Ferry's own ConcurrentModification (a conditional write lost a race), and Lambda's service-side
 * failures to run the function at all (AWS's advice: always retry these).
 */
export const TRANSIENT_ERRORS = [
  'ConcurrentModification',
  'TransactionConflictException',
  'ProvisionedThroughputExceededException',
  'ThrottlingException',
  'Lambda.ServiceException',
  'Lambda.AWSLambdaException',
  'Lambda.SdkClientException',
  'Lambda.TooManyRequestsException',
] as const;

/**
 * The RunTask failures that mean the copy worker never started: no Fargate capacity (Step Functions
 * reports it as ECS.AmazonECSException), an ECS server error, a throttled API call. A worker that
 * ran and stopped (States.TaskFailed) or ran out of time (States.Timeout) is NOT retried here: the
 * Catch hands it to the step after the copy, which reads the operation record and counts attempts.
 */
export const COPY_TASK_LAUNCH_ERRORS = ['ECS.AmazonECSException', 'ECS.ServerException', 'ECS.ThrottlingException'] as const;

export const RETRIERS = {
  /**
   * A step whose driver error must reach its Catch at once: the server flows roll a failed driver
   * call back rather than repeat it. Waits 1, 2, 4 s: a throttle or a lost race clears in seconds.
   */
  transient: { ErrorEquals: [...TRANSIENT_ERRORS], IntervalSeconds: 1, MaxAttempts: 3, BackoffRate: 2 },
  /**
   * A step that also repeats a DriverError: storage driver calls are idempotent under a retried id
   * (docs/drivers.md), and the compensation steps of the server flows must get through.
   */
  transientOrDriver: { ErrorEquals: ['DriverError', ...TRANSIENT_ERRORS], IntervalSeconds: 1, MaxAttempts: 3, BackoffRate: 2 },
  /**
   * A web-download import's Download (functions/images/import-steps.ts): a source that may answer
   * next time (ImportSourceUnavailable: no connection, a 5xx or 429, a body cut off) is tried again
   * after 5, 10, 20 s, each attempt downloading from the start to the same key; and the transient errors.
   */
  importSource: { ErrorEquals: ['ImportSourceUnavailable', ...TRANSIENT_ERRORS], IntervalSeconds: 5, MaxAttempts: 3, BackoffRate: 2 },
  /**
   * Undoing a share migration: retried on anything, longer (2, 4, 8, 16 s), because giving up
   * leaves a half-migrated share for an operator; its Catch then records what is left.
   */
  cleanup: { ErrorEquals: ['States.ALL'], IntervalSeconds: 2, MaxAttempts: 4, BackoffRate: 2 },
  /**
   * Starting the copy worker's Fargate task (see COPY_TASK_LAUNCH_ERRORS): capacity comes back in
   * minutes, not seconds, so 30, 60, 120, 240 s (7.5 minutes in all) before the copy counts as failed.
   */
  copyTaskLaunch: { ErrorEquals: [...COPY_TASK_LAUNCH_ERRORS], IntervalSeconds: 30, MaxAttempts: 4, BackoffRate: 2 },
} as const satisfies Record<string, Retrier>;

export type RetrierName = keyof typeof RETRIERS;

/**
 * A cloud backend works asynchronously (an EBS volume `creating`, a detach `detaching`): a driver
 * call that finds its work accepted but unfinished throws BackendNotReady (functions/core/errors.ts)
 * instead of waiting, and the Task runs again after this wait, with no function running meanwhile.
 * 20 s apart, up to an hour: a new or detached EBS volume settles in seconds to a minute. It comes
 * before the Task's own retrier, in the Tasks a machine lists in `waits`.
 */
export const BACKEND_WAIT = { ErrorEquals: ['BackendNotReady'], IntervalSeconds: 20, MaxAttempts: 180, BackoffRate: 1 } as const satisfies Retrier;

/**
 * The longer wait of a failback from EBS (functions/drivers/volume/aws-ebs-failback.ts): a batch's
 * volumes go home by snapshot and cross-region copy, minutes to hours. Every 5 minutes for up to 6
 * hours: 72 runs of a batch, so 50 batches stay far under Step Functions' 25,000 history events.
 */
export const FAILBACK_WAIT = { ErrorEquals: ['BackendNotReady'], IntervalSeconds: 300, MaxAttempts: 72, BackoffRate: 1 } as const satisfies Retrier;

/**
 * The wait of a share migration's phase 2 on a backend that replicates (aws-efs,
 * functions/drivers/share/aws-efs-migration.ts): migration_complete holds the cast until the
 * replica is close behind the source, then waits for the replica to hold everything written
 * before the cast, then for the replication to be deleted and the source retired. A replication
 * that has fallen behind catches up in minutes to hours, and giving up here fails phase 2 with
 * both instances in error (upstream's outcome), so: every minute for up to 6 hours (360 runs, about
 * 1,100 history events), not BACKEND_WAIT's hour.
 */
export const CUTOVER_WAIT = { ErrorEquals: ['BackendNotReady'], IntervalSeconds: 60, MaxAttempts: 360, BackoffRate: 1 } as const satisfies Retrier;

/**
 * An EBS attach (functions/attachments/attach-wait.ts): EC2 makes one in seconds, so volume-attach-wait
 * looks every 10 s, and an attach still `attaching` after 15 minutes (90 looks, 286 history
 * events at worst) is a failed one: its Catch records error_attaching and detaches what EC2 holds.
 */
export const ATTACH_WAIT = { ErrorEquals: ['BackendNotReady'], IntervalSeconds: 10, MaxAttempts: 90, BackoffRate: 1 } as const satisfies Retrier;

/**
 * A Catch is one catcher of every error (`States.ALL`), writing it where the next step reads it:
 * `$.error` from a step, `$.rollbackError` from a step that is itself undoing an `$.error` (a
 * compensation whose own failure must not overwrite the error it was undoing).
 */
export const CATCH_ERRORS = ['States.ALL'] as const;
export const CATCH_RESULT_PATHS = ['$.error', '$.rollbackError'] as const;

/** The Step Functions integration that runs the copy worker and waits for it to stop. */
export const COPY_TASK_RESOURCE = 'arn:aws:states:::ecs:runTask.sync';

const HOUR = 3600;
const DAY = 24 * HOUR;

/**
 * One run of the copy worker: 5 days, about 40 TiB at 100 MiB/s, or tens of millions of small files
 * on EFS. A run that times out is not lost: the next attempt resumes from the worker's journal.
 * No HeartbeatSeconds: the worker gets no task token to heartbeat with (Step Functions would time
 * a healthy copy out), and the local interpreter ignores the field (infra/asl/subset.ts).
 */
export const COPY_TASK_TIMEOUT_SECONDS = 5 * DAY;

/** How much longer than its function a Lambda Task may wait: the invoke itself, a cold start. */
export const LAMBDA_INVOKE_MARGIN_SECONDS = 10;

/** What the policy says of one machine. */
export interface MachinePolicy {
  /** The overall TimeoutSeconds of the machine; why this much is said where it is set. */
  readonly timeoutSeconds: number;
  /** The retrier of every Lambda Task the machine does not list in `tasks`. */
  readonly retrier: RetrierName;
  /** Tasks (by state name) that take another retrier. */
  readonly tasks?: Readonly<Record<string, RetrierName>>;
  /** Tasks (by state name) whose driver calls may find the backend not ready: BACKEND_WAIT first. */
  readonly waits?: readonly string[];
  /** The wait those Tasks take instead of BACKEND_WAIT (the same error, another pace). */
  readonly waitRetrier?: Retrier;
  /**
   * What the worst-case bound cannot read from the ASL: how often a state in a loop may run
   * (`runs`), and how many items a Map is sized for (`mapItems`).
   */
  readonly sizing?: { readonly runs?: Readonly<Record<string, number>>; readonly mapItems?: Readonly<Record<string, number>> };
}

/**
 * Machines made of Lambda steps without loops: their worst case, every Task at its timeout on every
 * attempt, is at most 5 hours (server-resize, a console start's Record included); one day leaves
 * nearly fivefold room and still ends a wedged execution the same day.
 */
const STEPS_TIMEOUT_SECONDS = 1 * DAY;

/**
 * The server flows: a driver error is rolled back, only the compensations repeat it: the machine's
 * rollbacks, and RecordFailed, which undoes what a console start's failed Record step left
 * recorded (functions/servers/console-start.ts).
 */
const serverFlow = (...compensations: string[]): MachinePolicy => ({
  timeoutSeconds: STEPS_TIMEOUT_SECONDS,
  retrier: 'transient',
  tasks: Object.fromEntries([...compensations, 'RecordFailed'].map((c) => [c, 'transientOrDriver' as const])),
});

/** The volume and share flows: every step repeats driver errors. */
const storageFlow: MachinePolicy = { timeoutSeconds: STEPS_TIMEOUT_SECONDS, retrier: 'transientOrDriver' };

/** The volumes a failover is sized for; the Map has one item per FAILOVER_BATCH_SIZE of them (functions/replication/failover-batch.ts). */
export const FAILOVER_SIZED_FOR_VOLUMES = 10_000;
/** The replicated volumes of one backend a replication pass is sized for, and its pages (PASS_PAGE_VOLUMES a page). */
export const REPLICATION_PASS_SIZED_FOR_VOLUMES = 10_000;
export const REPLICATION_PASS_PAGES = Math.ceil(REPLICATION_PASS_SIZED_FOR_VOLUMES / PASS_PAGE_VOLUMES);
/** The copy runs of one migration (functions/migration/flow.ts MAX_COPY_ATTEMPTS). */
export const MIGRATION_COPY_RUNS = 3;
/** migration_continue polls of one driver-assisted migration (functions/migration/flow.ts maxDriverPolls()). */
export const MIGRATION_DRIVER_POLLS = 2000;

export const MACHINE_POLICIES: Readonly<Record<StateMachineName, MachinePolicy>> = {
  /** Creating (and, in the rollback, deleting) the backend volume waits for the backend. */
  'volume-create': { ...storageFlow, waits: ['CreateOnBackend', 'Rollback'] },
  /**
   * FinishDelete waits (BACKEND_WAIT, up to an hour) while the volume holds connect intents of a
   * connect that died: the reconciler's recovery pass, every FERRY_RECONCILE_INTERVAL (300 s by
   * default), undoes them (functions/volumes/steps.ts finishDelete).
   */
  'volume-delete': { ...storageFlow, waits: ['DeleteOnBackend', 'FinishDelete'] },
  /**
   * Look waits for EC2's attachment (ATTACH_WAIT; a throttled look is BackendNotReady too). Failed
   * removes what EC2 holds: the transient and driver errors again, then the execution fails with the
   * attachment recorded error_attaching and `detachPending` left for an operator. Under 4 hours
   * with every look at its timeout: one day.
   */
  'volume-attach-wait': { ...storageFlow, waits: ['Look'], waitRetrier: ATTACH_WAIT },
  /**
   * 10,000 volumes are 51 batches, 13 rounds of 4 at MaxConcurrency 4. A failover's batch is one
   * driver call (9.2 hours in all with every batch at its 600 s timeout on all 4 attempts); a
   * failback batch from EBS also waits for its volumes' copies (FAILBACK_WAIT, up to 6 h per
   * batch), which makes the worst case 10.1 days. Eleven days: a failover or failback of a large
   * fleet on a slow site still ends by itself, with its Fail step, never half-done by the timeout.
   */
  'volume-failover': {
    timeoutSeconds: 11 * DAY,
    retrier: 'transientOrDriver',
    tasks: { Finish: 'transient', Fail: 'transient' },
    // A failback from EBS brings each volume home by snapshot and copy (aws-ebs-failback.ts): the
    // batch answers BackendNotReady until its volumes have arrived, and runs again after a wait.
    waits: ['Batch'],
    waitRetrier: FAILBACK_WAIT,
    sizing: { mapItems: { Batches: Math.ceil(FAILOVER_SIZED_FOR_VOLUMES / FAILOVER_BATCH_SIZE) } },
  },
  /**
   * An EBS snapshot stays `pending` for minutes: CreateOnBackend waits for it; Failed deletes what
   * the backend made under the snapshot's name, and waits too should the backend still be at it.
   */
  'snapshot-create': { ...storageFlow, waits: ['CreateOnBackend', 'Failed'] },
  /**
   * A web-download import: Download (up to 4 runs of the function's 15 minutes) retries a source
   * that may answer next time; Failed, the compensation, retries anything, since giving up would
   * leave the image importing until the reconciler's next pass. About an hour at worst: one day.
   */
  'image-import': { timeoutSeconds: STEPS_TIMEOUT_SECONDS, retrier: 'transient', tasks: { Download: 'importSource', Failed: 'cleanup' } },
  /**
   * The fan-out is one Task starting one execution per replicated backend: 21 minutes at worst
   * (310 s on each of 4 attempts); an hour.
   */
  'replication-schedule': { timeoutSeconds: HOUR, retrier: 'transient' },
  /**
   * A pass pages through the backend's replicated volumes (functions/replication/pass.ts
   * PASS_PAGE_VOLUMES a page), every step repeating driver errors (an EC2 throttle is a
   * DriverError; each volume's step is idempotent and looked at again). Sized for
   * REPLICATION_PASS_SIZED_FOR_VOLUMES: 200 pages, about 1,400 history events; with every page at
   * its timeout on every attempt 2.9 days, so three. A pass that slow has long since lost its
   * lease to the next one and stops at its next page (PassLeaseLost). The Catch's Failed only gives
   * the lease back, and retries anything.
   */
  'replication-pass': {
    timeoutSeconds: 3 * DAY,
    retrier: 'transientOrDriver',
    tasks: { Failed: 'cleanup' },
    sizing: { runs: { Page: REPLICATION_PASS_PAGES, 'MorePages?': REPLICATION_PASS_PAGES } },
  },
  /**
   * An EFS file system and its mount targets take a minute or two to become available, and as long
   * to go (functions/drivers/share/aws-efs.ts): CreateOnBackend and its Rollback (deleteShare),
   * DeleteOnBackend wait for them.
   */
  'share-create': { ...storageFlow, waits: ['CreateOnBackend', 'Rollback'] },
  'share-delete': { ...storageFlow, waits: ['DeleteOnBackend'] },
  /**
   * Phase 1 of a host-assisted migration is up to MIGRATION_COPY_RUNS copy runs of up to five days
   * each (15.1 days with every step at its timeout on every attempt); a driver-assisted one is up to
   * MIGRATION_DRIVER_POLLS polls, each after the 5 s wait (a driver that copies in slices) or the
   * 5-minute one (a backend that replicates by itself: 2000 polls are about 7 days of replication),
   * 19.6 days if every poll used its whole budget and the destination's create waited its hour.
   * Twenty days covers the longer path and stays under the 24.8 days a local timer can count.
   */
  'share-migration-start': {
    timeoutSeconds: 20 * DAY,
    retrier: 'transientOrDriver',
    tasks: { Cancel: 'cleanup', Rollback: 'cleanup' },
    // The destination's share made (migration_start's, or HostPrepare's createShare) and removed
    // again (DriverStartFailed, Cancel, Rollback) wait for an EFS file system and its mount targets.
    waits: ['DriverStart', 'DriverStartFailed', 'HostPrepare', 'Cancel', 'Rollback'],
    sizing: {
      runs: {
        CopyData: MIGRATION_COPY_RUNS,
        CopyEnded: MIGRATION_COPY_RUNS,
        WaitForDriver: MIGRATION_DRIVER_POLLS,
        WaitForReplication: MIGRATION_DRIVER_POLLS,
        DriverContinue: MIGRATION_DRIVER_POLLS,
      },
    },
  },
  /**
   * Phase 2: migration_complete (the cut-over of a replicating backend), the retired source's and
   * a rolled-back destination's deleteShare wait (CUTOVER_WAIT). Its worst case, every Task at its
   * timeout on every attempt of those waits, is 5.6 days: seven.
   */
  'share-migration-complete': {
    ...storageFlow,
    timeoutSeconds: 7 * DAY,
    tasks: { DeleteRetired: 'cleanup', Rollback: 'cleanup' },
    waits: ['DriverComplete', 'DeleteRetired', 'Rollback'],
    waitRetrier: CUTOVER_WAIT,
  },
  /** The cleanup's migration_cancel deletes the replication and the replica, waiting for both to go. */
  'share-migration-cancel': { ...storageFlow, tasks: { Cancel: 'cleanup' }, waits: ['Cancel'] },
  'server-create': serverFlow('BuildFailed'),
  'server-delete': serverFlow('DeleteFailed'),
  'server-power': serverFlow('PowerFailed'),
  'server-attach-volume': serverFlow('AttachFailed'),
  'server-detach-volume': serverFlow('DetachFailed'),
  'server-evacuate': serverFlow('Rollback'),
  'server-shelve': serverFlow('Rollback'),
  'server-unshelve': serverFlow('Rollback'),
  'server-swap-volume': serverFlow('SwapFailed'),
  'server-live-migrate': serverFlow('RollbackLiveMigration'),
  /** The cross-cell branch compensates with its own rollback, which also repeats driver errors. */
  'server-resize': serverFlow('Rollback', 'CrossCellRollback'),
  'server-confirm-resize': serverFlow('Rollback'),
  'server-revert-resize': serverFlow('Rollback'),
  'server-cross-cell-confirm': serverFlow('Rollback'),
  'server-cross-cell-revert': serverFlow('Rollback'),
};

/**
 * The one wiring table: which functions exist, which module and export run each, which tables
 * and state machines each touches, and which ASL file each state machine is. infra/aws deploys
 * exactly this; infra/local runs exactly this. Nothing else declares a function or a machine.
 *
 * In an ASL file a Task names a function by the substitution `${Fn<PascalName>}`, e.g.
 * `"Resource": "${FnVolumeSteps}"` for `volume-steps`. CDK substitutes the Lambda ARN; the local
 * stack maps the same placeholder to the handler in-process.
 */
import type { TableKey } from './core/tables.js';
import { stateMachineEnvName, type StateMachineName } from './core/machines.js';

export { stateMachineEnvName, type StateMachineName };

/**
 * api: behind the HTTP API; authorizer: its token check; step: a Task of state machines; scheduled:
 * run by a schedule (EventBridge on AWS); deploy: run by CloudFormation at deploy time (a custom
 * resource; the local stack does the same work itself at start).
 */
export type FunctionKind = 'api' | 'authorizer' | 'step' | 'scheduled' | 'deploy';

export interface FunctionWiring {
  name: string;
  kind: FunctionKind;
  /** Module path from the repository root. */
  entry: string;
  /** Exported handler name in that module. */
  export: string;
  description: string;
  /** For `api` functions: the path prefix the HTTP API routes here (`/volume` gets `/volume` and `/volume/{proxy+}`). */
  httpPrefix?: string;
  /** For `api` functions: `GET` paths answered without a token (version discovery), trailing slash ignored. */
  publicPaths?: string[];
  tables: TableKey[];
  /** State machines this function starts (gets their ARNs in the environment and start permission). */
  starts?: StateMachineName[];
  /** State machines whose executions this function only reads (gets their ARNs and DescribeExecution on their executions). */
  describes?: StateMachineName[];
  /** For `scheduled` functions: how often it runs, in minutes (an EventBridge rate on AWS). */
  scheduleRateMinutes?: number;
  usesBucket?: boolean;
  /**
   * Calls share drivers on the share storage: on AWS the function runs in the VPC with the share
   * file system (EFS) mounted at `/mnt/ferry-shares`, where the share backends' roots are, and gets
   * the copy worker's RunTask parameters (`FERRY_COPY_CLUSTER`, `FERRY_COPY_TASK_DEFINITION`,
   * `FERRY_COPY_SUBNETS`, `FERRY_COPY_SECURITY_GROUPS`, `FERRY_COPY_CONTAINER`). No effect locally.
   */
  mountsShareStorage?: boolean;
  /**
   * Runs volume drivers (its bundle contains them): on AWS its role gets the aws-ebs driver's EC2
   * permissions (infra/aws/driver-permissions.ts). test/infra/permissions.test.ts checks this flag
   * against each bundle's contents, both ways.
   */
  callsVolumeDrivers?: boolean;
  timeoutSeconds?: number;
  memoryMb?: number;
}

export interface StateMachineWiring {
  name: string;
  file: string;
  description: string;
  /** Functions its Task states call. */
  functions: string[];
}

export const STATE_MACHINES = [
  {
    name: 'volume-create',
    file: 'statemachines/volume-create.asl.json',
    description: 'Schedules a new volume onto a pool, creates it on the backend, and makes it available (or error, with capacity released); reserves an attachment for the instance given at create.',
    functions: ['volume-steps', 'attachment-steps'],
  },
  {
    name: 'volume-delete',
    file: 'statemachines/volume-delete.asl.json',
    description: 'Deletes a volume on its backend, releases its capacity and removes its record (or error_deleting).',
    functions: ['volume-steps'],
  },
  {
    name: 'volume-failover',
    file: 'statemachines/volume-failover.asl.json',
    description: 'Fails a replicated backend over to a replication target or back (reference §2.4), or runs and ends a drill: batches of volumes in a Map, one driver call and one conditional write per volume.',
    functions: ['replication-steps'],
  },
  {
    name: 'snapshot-create',
    file: 'statemachines/snapshot-create.asl.json',
    description: 'Waits for a volume snapshot the backend is still making (an EBS snapshot pending): creates it on the backend under its stable name, retried while the backend answers BackendNotReady, then marks it available (or error, with whatever the backend made under that name deleted).',
    functions: ['snapshot-steps'],
  },
  {
    name: 'share-create',
    file: 'statemachines/share-create.asl.json',
    description: 'Schedules a new share onto a pool (capacity reserved), creates it on the backend and makes it available (or error, with capacity released and no backend share).',
    functions: ['share-steps'],
  },
  {
    name: 'share-delete',
    file: 'statemachines/share-delete.asl.json',
    description: 'Deletes a share on its backend, releases its capacity and removes its record (or error_deleting).',
    functions: ['share-steps'],
  },
  {
    name: 'share-migration-start',
    file: 'statemachines/share-migration-start.asl.json',
    description: 'Phase 1 of a share migration: driver-assisted (migration_start, then migration_continue in a bounded Wait loop) or host-assisted (read-only source, destination, data node access, the copy worker as an ECS task); cancel and every failure undo exactly what was made.',
    functions: ['migration-steps'],
  },
  {
    name: 'share-migration-complete',
    file: 'statemachines/share-migration-complete.asl.json',
    description: 'Phase 2 of a share migration (migration_complete): rules onto the destination, the share flips to it, the source is deleted with its capacity, migration_success.',
    functions: ['migration-steps'],
  },
  {
    name: 'share-migration-cancel',
    file: 'statemachines/share-migration-cancel.asl.json',
    description: 'migration_cancel after phase 1 ended (or of what a failed migration left): removes the destination, restores the source rules, migration_cancelled.',
    functions: ['migration-steps'],
  },
  {
    name: 'server-create',
    file: 'statemachines/server-create.asl.json',
    description: 'Boots a server: schedule and claim, port binding, volume block devices through the attachments API, spawn; a failure undoes all of it and leaves the instance ERROR.',
    functions: ['server-steps'],
  },
  {
    name: 'server-delete',
    file: 'statemachines/server-delete.asl.json',
    description: 'Deletes a server: guest, attachments (and delete_on_termination volumes), ports, allocations, records.',
    functions: ['server-steps'],
  },
  {
    name: 'server-power',
    file: 'statemachines/server-power.asl.json',
    description: 'Stops, starts or hard-reboots a server.',
    functions: ['server-steps'],
  },
  {
    name: 'server-attach-volume',
    file: 'statemachines/server-attach-volume.asl.json',
    description: 'Attaches a volume on the compute host (attachment_update, driver attach, attachment_complete), or rolls it back.',
    functions: ['server-steps'],
  },
  {
    name: 'server-detach-volume',
    file: 'statemachines/server-detach-volume.asl.json',
    description: 'Detaches a volume on the compute host (driver detach, attachment_delete), or rolls the volume back to in-use.',
    functions: ['server-steps'],
  },
  {
    name: 'server-evacuate',
    file: 'statemachines/server-evacuate.asl.json',
    description: 'Evacuates a server off a down host: claim on another host of the cell, volume attachments switched to the destination, spawnEvacuated, migration done; a failure leaves ERROR (or the vm_state when no host was found) and nothing on the destination.',
    functions: ['server-steps'],
  },
  {
    name: 'server-shelve',
    file: 'statemachines/server-shelve.asl.json',
    description: 'Shelves (snapshot to S3) and offloads a server: guest destroyed, volume connections terminated, bindings and allocations released; a failure reverts the task state.',
    functions: ['server-steps'],
  },
  {
    name: 'server-unshelve',
    file: 'statemachines/server-unshelve.asl.json',
    description: 'Unshelves a server: schedule and claim, bindings, volumes connected on the host, spawn from the shelved image or boot volume; a failure leaves it SHELVED_OFFLOADED with nothing held.',
    functions: ['server-steps'],
  },
  {
    name: 'server-swap-volume',
    file: 'statemachines/server-swap-volume.asl.json',
    description: 'Swaps a server volume for another (block copy, new attachment completed, old deleted), or rolls it back.',
    functions: ['server-steps'],
  },
  {
    name: 'server-live-migrate',
    file: 'statemachines/server-live-migrate.asl.json',
    description: 'Live-migrates a server within its cell (schedule, pre_live_migration with new attachments, copy and switch-over, post), rolling back before the switch or finishing forward after it.',
    functions: ['server-steps'],
  },
  {
    name: 'server-resize',
    file: 'statemachines/server-resize.asl.json',
    description: 'Cold migration / resize, same-cell or cross-cell: prep (allocation to the migration, destination claimed); same cell: resize_instance on the source, finish_resize on the destination; cross cell: hidden copy in the target cell, prep at dest and source (snapshot), finish at dest and mapping flip. VERIFY_RESIZE either way; a failure rolls back to the source.',
    functions: ['server-steps'],
  },
  {
    name: 'server-confirm-resize',
    file: 'statemachines/server-confirm-resize.asl.json',
    description: 'Confirms a resize on the source: kept disks removed, source binding deleted, the migration allocation released.',
    functions: ['server-steps'],
  },
  {
    name: 'server-revert-resize',
    file: 'statemachines/server-revert-resize.asl.json',
    description: 'Reverts a resize: destination torn down, then the guest defined again on the source with its volumes and allocations.',
    functions: ['server-steps'],
  },
  {
    name: 'server-cross-cell-confirm',
    file: 'statemachines/server-cross-cell-confirm.asl.json',
    description: 'Confirms a cross-cell resize: kept disks, source bindings and placeholder attachments removed at the source, migration allocation released, the source cell copy hard-deleted.',
    functions: ['server-steps'],
  },
  {
    name: 'server-cross-cell-revert',
    file: 'statemachines/server-cross-cell-revert.asl.json',
    description: 'Reverts a cross-cell resize: source cell copy updated, instance mapping flipped back, destination guest and target cell copy removed, the guest defined again on the source.',
    functions: ['server-steps'],
  },
] as const satisfies readonly (StateMachineWiring & { name: StateMachineName })[];


export const FUNCTIONS: FunctionWiring[] = [
  {
    name: 'authorizer',
    kind: 'authorizer',
    entry: 'functions/auth/authorizer.ts',
    export: 'handler',
    description: 'HTTP API Lambda authorizer: token table lookup on AWS, upstream noauth `user:project` tokens locally.',
    tables: ['tokens'],
  },
  {
    name: 'volume-api',
    kind: 'api',
    entry: 'functions/api/volume.ts',
    export: 'handler',
    description: 'Cinder v3 REST API: versions, volumes, types, manageable volumes, attachments, snapshots, os-services (failover/freeze/thaw), capabilities, scheduler stats.',
    httpPrefix: '/volume',
    publicPaths: ['/volume', '/volume/v3'],
    tables: ['volume'],
    callsVolumeDrivers: true,
    // snapshot-create: only for a snapshot the backend is still making when the request answers.
    starts: ['volume-create', 'volume-delete', 'volume-failover', 'snapshot-create'],
    timeoutSeconds: 29,
  },
  {
    name: 'volume-steps',
    kind: 'step',
    entry: 'functions/volumes/steps.ts',
    export: 'handler',
    description: 'Step handlers of the volume state machines (schedule, create on backend, delete, mark status).',
    tables: ['volume'],
    callsVolumeDrivers: true,
    timeoutSeconds: 120,
  },
  {
    name: 'attachment-steps',
    kind: 'step',
    entry: 'functions/attachments/steps.ts',
    export: 'handler',
    description: 'Step handlers of the attachments run by volume-create (reserve an attachment for the instance given at create, or record why not).',
    tables: ['volume'],
    callsVolumeDrivers: true,
    timeoutSeconds: 120,
  },
  {
    name: 'snapshot-steps',
    kind: 'step',
    entry: 'functions/snapshots/steps.ts',
    export: 'handler',
    description: 'Step handlers of snapshot-create (create the snapshot on the backend, mark it available; on failure delete what the backend made under its name and record error).',
    tables: ['volume'],
    callsVolumeDrivers: true,
    timeoutSeconds: 120,
  },
  {
    name: 'replication-steps',
    kind: 'step',
    entry: 'functions/replication/steps.ts',
    export: 'handler',
    description: 'Step handlers of volume-failover (prepare: target and batches; batch: driver failover_host + per-volume rules; finish/fail: service state).',
    tables: ['volume'],
    callsVolumeDrivers: true,
    // A batch of 200 volumes is one driver call and two transactions of writes; 10 minutes is ample.
    timeoutSeconds: 900,
    memoryMb: 1024,
  },
  {
    name: 'share-api',
    kind: 'api',
    entry: 'functions/api/share.ts',
    export: 'handler',
    description: 'Manila v2 REST API: versions, shares, share types, share networks, access rules, export locations, share instances, services, scheduler pools.',
    httpPrefix: '/share',
    publicPaths: ['/share', '/share/v2'],
    tables: ['share'],
    mountsShareStorage: true,
    starts: ['share-create', 'share-delete', 'share-migration-start', 'share-migration-complete', 'share-migration-cancel'],
    timeoutSeconds: 29,
  },
  {
    name: 'share-steps',
    kind: 'step',
    entry: 'functions/shares/steps.ts',
    export: 'handler',
    description: 'Step handlers of the share machines (schedule, create on backend, mark available, rollback, delete).',
    tables: ['share'],
    mountsShareStorage: true,
    timeoutSeconds: 120,
  },
  {
    name: 'migration-steps',
    kind: 'step',
    entry: 'functions/migration/steps.ts',
    export: 'handler',
    description: 'Step handlers of the share migration machines (begin, reserve destination, driver start/continue/complete, host-assisted prepare and copy bookkeeping, flip, delete the retired source, cleanup).',
    tables: ['share'],
    mountsShareStorage: true,
    // migration_complete of the local driver runs a final sync pass: minutes for a large share.
    timeoutSeconds: 900,
    memoryMb: 1024,
  },
  {
    name: 'compute-api',
    kind: 'api',
    entry: 'functions/api/compute.ts',
    export: 'handler',
    description: 'Nova v2.1 REST API: versions, flavors and extra specs, os-services (forced_down), os-hypervisors, os-availability-zone; cell and host mappings in compute-api, services and compute nodes in each cell table.',
    httpPrefix: '/compute',
    publicPaths: ['/compute', '/compute/v2.1'],
    tables: ['compute-api', 'cell1', 'cell2', 'volume'],
    callsVolumeDrivers: true,
    usesBucket: true,
    starts: ['server-create', 'server-delete', 'server-power', 'server-attach-volume', 'server-detach-volume', 'server-swap-volume', 'server-resize', 'server-confirm-resize', 'server-revert-resize', 'server-cross-cell-confirm', 'server-cross-cell-revert', 'server-evacuate', 'server-shelve', 'server-unshelve', 'server-live-migrate', 'volume-delete'],
    timeoutSeconds: 29,
  },
  {
    name: 'server-steps',
    kind: 'step',
    entry: 'functions/servers/steps.ts',
    export: 'handler',
    description: 'Step handlers of the server machines: Nova conductor and compute roles (schedule, claim, ports, the attachments API calls of reference §2.1, compute driver calls, rollbacks).',
    tables: ['compute-api', 'cell1', 'cell2', 'volume'],
    callsVolumeDrivers: true,
    usesBucket: true,
    starts: ['volume-delete'],
    timeoutSeconds: 900,
    memoryMb: 1024,
  },
  {
    name: 'reconciler',
    kind: 'scheduled',
    entry: 'functions/audit/reconciler.ts',
    export: 'handler',
    description: 'The reconciler (ferry audit --repair on a schedule): finishes or undoes intents crashed calls left, abandons server operations whose machine never started, repairs what the audit proves safe (unused exports, attachments no BDM or operation holds) and logs the rest.',
    // What the audit reads and the repairs write; the share backends are read on the share storage.
    tables: ['volume', 'share', 'compute-api', 'cell1', 'cell2'],
    callsVolumeDrivers: true,
    // Whether a server operation's machine ever started, whether a creating snapshot's machine is still
    // waiting for it (functions/snapshots/recovery.ts); abandoning an offloaded detach deletes its delete_on_termination volume.
    describes: [...STATE_MACHINES.map((m) => m.name).filter((m) => m.startsWith('server-')), 'snapshot-create'],
    starts: ['volume-delete'],
    mountsShareStorage: true,
    scheduleRateMinutes: 5,
    // Under the rate, so two passes do not overlap (overlapping ones would still be safe: every repair is conditional).
    timeoutSeconds: 280,
    memoryMb: 1024,
  },
  {
    name: 'replication-pass',
    kind: 'scheduled',
    entry: 'functions/replication/pass.ts',
    export: 'handler',
    description: 'The replication schedule of aws-ebs backends with replication targets: each run snapshots every replicated volume, copies the newest completed snapshot to each target region and prunes older ones (never waits; frozen and failed-over backends are skipped).',
    tables: ['volume'],
    callsVolumeDrivers: true,
    scheduleRateMinutes: 5,
    timeoutSeconds: 280,
  },
  {
    name: 'inventory-apply',
    kind: 'deploy',
    entry: 'functions/inventory/deploy.ts',
    export: 'handler',
    description: 'Applies the inventory given to `cdk deploy -c inventory=FILE` (volume and share backends and types, projects, cells, hosts, flavors, networks, images) on create and update of its custom resource.',
    tables: ['volume', 'share', 'compute-api', 'cell1', 'cell2'],
    callsVolumeDrivers: true,
    // Images are uploaded to the bucket.
    usesBucket: true,
    // A share backend's root is a directory on the share storage: the apply makes it, so it mounts
    // that storage (in the VPC, reaching DynamoDB and S3 through its gateway endpoints).
    mountsShareStorage: true,
    timeoutSeconds: 300,
  },
];

/** `volume-steps` -> `FnVolumeSteps`: the ASL substitution key for a function's ARN. */
export function substitutionKey(functionName: string): string {
  return 'Fn' + functionName.split(/[-_]/).map((p) => p.charAt(0).toUpperCase() + p.slice(1)).join('');
}

export function functionByName(name: string): FunctionWiring {
  const f = FUNCTIONS.find((x) => x.name === name);
  if (!f) throw new Error(`no function ${name} in the wiring table`);
  return f;
}

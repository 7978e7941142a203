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
import { STATE_MACHINES } from './wiring-machines.js';

export { stateMachineEnvName, type StateMachineName };
export { STATE_MACHINES, type StateMachineWiring } from './wiring-machines.js';

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
  /**
   * For `api` functions: the function checks every request's token itself, so no route of it goes
   * through the authorizer (the identity API: issuing a token needs none, and its refusals carry
   * Keystone's own body).
   */
  authenticatesItself?: boolean;
  tables: TableKey[];
  /** Only reads its tables: on AWS its role gets DynamoDB's read actions on them, no write (the permission test checks every call against that). */
  readsTablesOnly?: boolean;
  /** State machines this function starts (gets their ARNs in the environment and start permission). */
  starts?: StateMachineName[];
  /** State machines whose executions this function only reads (gets their ARNs and DescribeExecution on their executions). */
  describes?: StateMachineName[];
  /** For `scheduled` functions: how often it runs, in minutes (an EventBridge rate on AWS). */
  scheduleRateMinutes?: number;
  usesBucket?: boolean;
  /** With `usesBucket`: the key prefix its role may read and write (`images/`), instead of the whole bucket. */
  bucketPrefix?: string;
  /**
   * Calls share drivers on the share storage: on AWS the function runs in the VPC with the share
   * file system (EFS) mounted at `/mnt/ferry-shares`, where the share backends' roots are, and gets
   * the copy worker's RunTask parameters (`FERRY_COPY_CLUSTER`, `FERRY_COPY_TASK_DEFINITION`,
   * `FERRY_COPY_SUBNETS`, `FERRY_COPY_SECURITY_GROUPS`, `FERRY_COPY_CONTAINER`). No effect locally.
   */
  mountsShareStorage?: boolean;
  /**
   * With `mountsShareStorage`: registers (and deregisters) a migration's own copy task definition,
   * whose volumes are the migration's EFS file systems (functions/migration/copy-task-definition.ts):
   * its role gets those ECS calls and iam:PassRole of the copy task's two roles, and its environment
   * the task role and the stack's VPC (`FERRY_COPY_TASK_ROLE`, `FERRY_COPY_VPC_ID`).
   */
  registersCopyTasks?: boolean;
  /**
   * With `mountsShareStorage`: lists the migrations' copy task definition families and deregisters
   * those no migration holds (functions/audit/copy-task-repairs.ts): its role gets
   * ecs:ListTaskDefinitionFamilies, DescribeTaskDefinition, ListTaskDefinitions and
   * DeregisterTaskDefinition, nothing else of ECS.
   */
  auditsCopyTasks?: boolean;
  /** Runs volume drivers (its bundle contains them): its role gets the aws-ebs driver's EC2 permissions (infra/aws/driver-permissions.ts); test/infra/permissions.test.ts checks the flag against the bundle, both ways. */
  callsVolumeDrivers?: boolean;
  /** Runs share drivers, likewise: the aws-efs driver's EFS and EC2 (security groups, mount targets' network interfaces) permissions. */
  callsShareDrivers?: boolean;
  /** For `deploy` functions: the custom resource that runs it (the inventory of `-c inventory=FILE`, or the identity every stack starts with). */
  deployResource?: 'inventory' | 'identity';
  timeoutSeconds?: number;
  memoryMb?: number;
  /** Lambda's /tmp, when 512 MB is not enough. */
  ephemeralStorageMb?: number;
}

export const FUNCTIONS: FunctionWiring[] = [
  {
    name: 'authorizer',
    kind: 'authorizer',
    entry: 'functions/auth/authorizer.ts',
    export: 'handler',
    description: 'HTTP API Lambda authorizer: token table lookup (identity tokens from /identity, `ferry token create` tokens); locally also upstream noauth `user:project` tokens.',
    tables: ['tokens'],
  },
  {
    name: 'identity-api',
    kind: 'api',
    entry: 'functions/api/identity.ts',
    export: 'handler',
    description: 'Keystone v3 REST API: versions, tokens (password, token and application credential methods; validate, check, revoke), the catalog, projects, users, roles, role assignments, application credentials.',
    httpPrefix: '/identity',
    publicPaths: ['/identity', '/identity/v3'],
    authenticatesItself: true,
    tables: ['tokens'],
    timeoutSeconds: 29,
  },
  {
    name: 'volume-api',
    kind: 'api',
    entry: 'functions/api/volume.ts',
    export: 'handler',
    description: 'Cinder v3 REST API: versions, volumes, types, manageable volumes, attachments, snapshots, os-services (failover/freeze/thaw), capabilities, scheduler stats, limits, os-availability-zone.',
    httpPrefix: '/volume',
    publicPaths: ['/volume', '/volume/v3'],
    // compute-api: the image record a create from imageRef reads (servers/volume-image-sources.ts).
    // compute-api and the cells: image records (volumes from images), and Nova's in-use check of an
    // attachment a non-service user deletes: ConditionChecks on the cells' instance items in the
    // delete's transaction (servers/attachment-users.ts).
    tables: ['volume', 'compute-api', 'cell1', 'cell2'],
    callsVolumeDrivers: true,
    // snapshot-create: only for a snapshot the backend is still making when the request answers;
    // volume-attach-wait: only for an attach the backend has not finished (attachments/attach-wait.ts).
    starts: ['volume-create', 'volume-delete', 'volume-failover', 'snapshot-create', 'volume-attach-wait'],
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
    description: 'Step handlers of the attachments run by volume-create (reserve an attachment for the instance given at create, or record why not) and by volume-attach-wait (look at the backend\'s attach; on failure error_attaching and detach).',
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
    // A batch of 198 volumes is one driver call and two transactions of writes; 10 minutes is ample.
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
    callsShareDrivers: true,
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
    callsShareDrivers: true,
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
    callsShareDrivers: true,
    mountsShareStorage: true,
    registersCopyTasks: true,
    // migration_complete of the local driver runs a final sync pass: minutes for a large share.
    timeoutSeconds: 900,
    memoryMb: 1024,
  },
  {
    name: 'compute-api',
    kind: 'api',
    entry: 'functions/api/compute.ts',
    export: 'handler',
    description: 'Nova v2.1 REST API: versions, flavors and extra specs, os-services (forced_down), os-hypervisors, os-availability-zone, limits and os-quota-sets (read-only); cell and host mappings in compute-api, services and compute nodes in each cell table.',
    httpPrefix: '/compute',
    publicPaths: ['/compute', '/compute/v2.1'],
    tables: ['compute-api', 'cell1', 'cell2', 'volume'],
    callsVolumeDrivers: true,
    usesBucket: true,
    starts: ['server-create', 'server-delete', 'server-power', 'server-attach-volume', 'server-detach-volume', 'server-swap-volume', 'server-resize', 'server-confirm-resize', 'server-revert-resize', 'server-cross-cell-confirm', 'server-cross-cell-revert', 'server-evacuate', 'server-shelve', 'server-unshelve', 'server-live-migrate', 'volume-delete', 'volume-create'],
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
    // volume-attach-wait: the attachments API's update (servers/cinder.ts) starts it for an attach the backend has not finished.
    starts: ['volume-delete', 'volume-attach-wait'],
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
    callsShareDrivers: true,
    // Whether a server operation's machine ever started, whether a creating snapshot's machine is still
    // waiting for it (functions/snapshots/recovery.ts), whether an importing image's machine still runs
    // (functions/images/import-recovery.ts); abandoning an offloaded detach deletes its delete_on_termination volume.
    describes: [...STATE_MACHINES.map((m) => m.name).filter((m) => m.startsWith('server-')), 'snapshot-create', 'image-import'],
    // volume-attach-wait: an attach wait whose start failed is started under its recorded name (functions/attachments/attach-wait-recovery.ts).
    starts: ['volume-delete', 'volume-attach-wait'],
    // An import its machine left (or never started) is put back to queued with what it stored removed.
    usesBucket: true,
    bucketPrefix: 'images/',
    mountsShareStorage: true,
    // Deregisters the copy task definitions of migrations that ended or are gone (functions/audit/copy-task-repairs.ts).
    auditsCopyTasks: true,
    scheduleRateMinutes: 5,
    // Under the rate, so two passes do not overlap (overlapping ones would still be safe: every repair is conditional).
    timeoutSeconds: 280,
    memoryMb: 1024,
  },
  {
    name: 'replication-pass-steps',
    kind: 'step',
    entry: 'functions/replication/pass.ts',
    export: 'handler',
    description: 'Step handlers of the replication machines: start-passes (one replication-pass execution per replicated aws-ebs backend), decide (frozen, failed over, not enabled: end; else take the backend\'s pass lease), page (one page of replicated volumes snapshotted, copied to each target region, pruned), finish (the lag recorded, the lease given back), failed.',
    tables: ['volume'],
    callsVolumeDrivers: true,
    starts: ['replication-pass'],
    // A page of PASS_PAGE_VOLUMES volumes is a few EC2 calls each: 300 s is ample, and under the pass lease's 15 minutes.
    timeoutSeconds: 300,
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
    deployResource: 'inventory',
    timeoutSeconds: 300,
  },
  {
    name: 'identity-bootstrap',
    kind: 'deploy',
    entry: 'functions/identity/bootstrap.ts',
    export: 'handler',
    description: 'Makes the identity a deployed stack starts with (roles admin, member, reader; project and user admin, its first password from the stack\'s secret) when its custom resource is created and on each deploy that changes it; keeps whatever exists.',
    tables: ['tokens'],
    // Its role also reads the admin password secret, that one only (infra/aws/identity-bootstrap.ts).
    deployResource: 'identity',
    timeoutSeconds: 60,
  },
  {
    name: 'image-api',
    kind: 'api',
    entry: 'functions/api/image.ts',
    export: 'handler',
    description: 'Glance v2 REST API: versions, images (list, show, create, JSON-patch update, delete), image data upload and download (bytes in the bucket under images/<id>), schemas.',
    httpPrefix: '/image',
    publicPaths: ['/image', '/image/versions', '/image/v2'],
    // Image records live in compute-api beside the flavors and networks.
    tables: ['compute-api'],
    usesBucket: true,
    bucketPrefix: 'images/',
    // A web-download import runs in its machine, not in the request.
    starts: ['image-import'],
    timeoutSeconds: 29,
  },
  {
    name: 'image-import-steps',
    kind: 'step',
    entry: 'functions/images/import-steps.ts',
    export: 'handler',
    description: 'Step handlers of image-import (download: the URI streamed to images/<id>, the image made active; import-failed: that object removed, the image back to queued with the reason).',
    tables: ['compute-api'],
    usesBucket: true,
    bucketPrefix: 'images/',
    // The download has Lambda's whole 15 minutes (its own deadline is 840 s, import-steps.ts); a body
    // of unknown length is spooled to /tmp before its PutObject (import-spool.ts).
    timeoutSeconds: 900,
    memoryMb: 1024,
    ephemeralStorageMb: 10_240,
  },
  {
    name: 'network-api',
    kind: 'api',
    entry: 'functions/api/network.ts',
    export: 'handler',
    description: 'Neutron v2.0 REST API (read): versions, networks, subnets (one per network), ports, extensions, quotas.',
    httpPrefix: '/network',
    publicPaths: ['/network'],
    // Only reads: the networks and the ports in compute-api.
    tables: ['compute-api'],
    timeoutSeconds: 29,
  },
  {
    name: 'ops-api',
    kind: 'api',
    entry: 'functions/api/ferry.ts',
    export: 'handler',
    description: 'Ferry\'s own routes: GET /ferry/console (the operator console, one page) and GET /ferry/ops (operations in flight and recent failures, the volume backends\' replication state and lag, the last audit), read from the records the operations keep (functions/ops).',
    httpPrefix: '/ferry',
    publicPaths: ['/ferry/console'],
    // Only reads: the operations' records, the backends, the last audit, the server actions of each cell.
    tables: ['volume', 'share', 'compute-api', 'cell1', 'cell2'],
    readsTablesOnly: true,
    timeoutSeconds: 29,
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

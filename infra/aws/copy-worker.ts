/**
 * The copy worker on AWS: the host-assisted data path of share migration (docs/copy-worker.md).
 *
 * Share backends on AWS are the same local share driver as on the local stack (a share is a
 * directory under its backend's root); every root lives on ONE EFS file system, mounted at
 * SHARE_MOUNT_PATH both in the Lambda functions that call share drivers and in the copy task, so a
 * path (a backend root such as `/mnt/ferry-shares/nfs-a`, a share's export path) means the same
 * thing in both places.
 *
 * What this construct creates:
 * - the network (share-network.ts): a VPC with isolated subnets only, its gateway endpoints and the
 *   interface endpoints the deployment's calls need, the functions' and the task's groups;
 * - the EFS file system (encrypted at rest, elastic throughput, automatic backups) and one access
 *   point `/ferry-shares` that acts as uid/gid 0, so the worker can keep owners and the Lambdas
 *   can manage what the worker wrote;
 * - NFS (2049) into the file system from the functions' group and the task's group only;
 * - the ECS cluster and the Fargate task definition: one container, `copy-worker`, built from
 *   Dockerfile.copy-worker, the access point mounted at SHARE_MOUNT_PATH (TLS + IAM), logs to
 *   CloudWatch.
 *
 * Without share backends of a local kind (`shareStorage` false: aws-efs backends only) it is the
 * cluster and the task definition alone, with no volume: no VPC, endpoints or EFS.
 *
 * The state machines start the task with `arn:aws:states:::ecs:runTask.sync`; a step function
 * with `mountsShareStorage` (migration-steps) hands them the RunTask parameters, built from the
 * FERRY_COPY_* environment (`functionEnvironment()`).
 */
import { ArnFormat, Duration, Fn, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import type { ITable } from 'aws-cdk-lib/aws-dynamodb';
import { SecurityGroup, type SubnetSelection, type Vpc } from 'aws-cdk-lib/aws-ec2';
import { Platform } from 'aws-cdk-lib/aws-ecr-assets';
import {
  CfnCluster,
  Cluster,
  ContainerImage,
  ContainerInsights,
  CpuArchitecture,
  FargateTaskDefinition,
  LogDrivers,
  OperatingSystemFamily,
  type ContainerDefinition,
} from 'aws-cdk-lib/aws-ecs';
import { AccessPoint, FileSystem, PerformanceMode, ThroughputMode } from 'aws-cdk-lib/aws-efs';
import { PolicyStatement, type IGrantable } from 'aws-cdk-lib/aws-iam';
import { FileSystem as LambdaFileSystem } from 'aws-cdk-lib/aws-lambda';
import { LogGroup, type RetentionDays } from 'aws-cdk-lib/aws-logs';
import type { StateMachine } from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { addShareNetwork, ISOLATED_SUBNETS, type ShareNetwork, type VpcApi } from './share-network.js';

/** Where the share file system is mounted, in the functions and in the copy task alike. */
export const SHARE_MOUNT_PATH = '/mnt/ferry-shares';
/** The directory on the file system the access point exposes (and creates on first use). */
export const SHARE_ACCESS_POINT_PATH = '/ferry-shares';
/** The copy task's one container; RunTask overrides name it. */
export const COPY_CONTAINER_NAME = 'copy-worker';
/** The Dockerfile (at the repository root) of the copy task's image. */
export const COPY_DOCKERFILE = 'Dockerfile.copy-worker';
/** Fargate size of one copy task: 2 vCPU (two copy threads, SHA-256 bound), 4 GiB (the minimum for 2 vCPU). */
export const COPY_TASK_CPU = 2048;
export const COPY_TASK_MEMORY_MIB = 4096;
/** The Step Functions integration that starts the task and waits for it. */
export const RUN_TASK_SYNC = 'arn:aws:states:::ecs:runTask.sync';
/** The EventBridge rule Step Functions manages to learn that a task it started has stopped. */
export const ECS_TASK_EVENTS_RULE = 'StepFunctionsGetEventsForECSTaskRule';

/**
 * The context key that says whether the deployment has share backends (`-c shareBackends=false`).
 * Without them nothing needs the share storage, and its fixed cost (the interface endpoints, about
 * $58 a month idle) buys nothing: FerryStack then creates no copy worker at all.
 */
export const SHARE_BACKENDS_CONTEXT = 'shareBackends';

/** `shareBackends` from the context: true (the default) or false, as a boolean or as the CLI's string. */
export function shareBackendsFromContext(scope: Construct): boolean {
  const raw: unknown = scope.node.tryGetContext(SHARE_BACKENDS_CONTEXT);
  if (raw === undefined || raw === true || raw === 'true') return true;
  if (raw === false || raw === 'false') return false;
  throw new Error(`context ${SHARE_BACKENDS_CONTEXT} must be true or false, not ${String(raw)}`);
}

/** What a function that starts the copy task gets in its environment. */
export const COPY_ENV = {
  cluster: 'FERRY_COPY_CLUSTER',
  taskDefinition: 'FERRY_COPY_TASK_DEFINITION',
  subnets: 'FERRY_COPY_SUBNETS',
  securityGroups: 'FERRY_COPY_SECURITY_GROUPS',
  container: 'FERRY_COPY_CONTAINER',
  /** `false` where the VPC has no ECS endpoint (no aws-efs backend: no migration registers a family), so the reconciler lists none (functions/audit/copy-task-repairs.ts). */
  migrationFamilies: 'FERRY_COPY_MIGRATION_FAMILIES',
} as const;

/** What a function with `registersCopyTasks` also gets: the task role (the data node's `user` rule on an aws-efs share), the stack's VPC. */
export const COPY_REGISTRAR_ENV = { taskRole: 'FERRY_COPY_TASK_ROLE', vpcId: 'FERRY_COPY_VPC_ID' } as const;

/** The family of a migration's own copy task definition: `<family>-m-<migration id>` (functions/migration/copy-task-definition.ts). */
export const MIGRATION_FAMILY_SUFFIX = '-m-';

/** NFS client permissions on the share file system, all through the one access point. */
const EFS_CLIENT_ACTIONS = ['elasticfilesystem:ClientMount', 'elasticfilesystem:ClientWrite', 'elasticfilesystem:ClientRootAccess'];

export interface CopyWorkerProps {
  /** The `share` table: the worker writes its operation record there (pk COPY#<id>). */
  readonly shareTable: ITable;
  /** Environment variable name under which the container gets the share table's name. */
  readonly shareTableEnv: string;
  /** The build context of the image (the repository root; Dockerfile.copy-worker is there). */
  readonly assetDirectory: string;
  /** The task definition family (a fixed name, so IAM can name it). */
  readonly family: string;
  /** For the share file system, as for the tables and buckets. */
  readonly removalPolicy: RemovalPolicy;
  /**
   * Whether the deployment has share backends of a local kind, whose shares are directories on the
   * share storage: the VPC, its endpoints, the EFS file system, mounted by the functions and the
   * task. Without it (aws-efs backends only) the construct is the cluster and the task definition
   * alone: a migration's own revision mounts its file systems and runs in its backends' subnets.
   * @default true
   */
  readonly shareStorage?: boolean;
  /** The AWS APIs the functions in the VPC call beyond the share storage's own (share-network.ts vpcApisFor); only with the share storage. @default none */
  readonly vpcApis?: readonly VpcApi[];
  readonly logRetention: RetentionDays;
}

/** The share storage: what only share backends of a local kind need (CopyWorkerProps.shareStorage). */
export interface ShareStorage extends ShareNetwork {
  readonly fileSystem: FileSystem;
  readonly accessPoint: AccessPoint;
  /** The interface endpoints beyond the share storage's own. */
  readonly vpcApis: readonly VpcApi[];
}

export class CopyWorker extends Construct {
  /** Undefined when the deployment has no share backend of a local kind. */
  readonly storage?: ShareStorage;
  readonly cluster: Cluster | CfnCluster;
  readonly clusterArn: string;
  readonly taskDefinition: FargateTaskDefinition;
  readonly container: ContainerDefinition;
  /** Where the functions and the task run: the isolated subnets. */
  readonly subnets: SubnetSelection = ISOLATED_SUBNETS;

  constructor(scope: Construct, id: string, props: CopyWorkerProps) {
    super(scope, id);
    const stack = Stack.of(this);
    this.storage = (props.shareStorage ?? true) ? this.addShareStorage(props) : undefined;

    // --- the task ------------------------------------------------------------------------------
    // Per-task CPU, memory and network: what sizing the task needs; a few metrics per task. Without
    // the VPC the cluster is the bare resource (ecs.Cluster would make a VPC of its own, with NAT).
    this.cluster = this.storage
      ? new Cluster(this, 'Cluster', { vpc: this.storage.vpc, containerInsightsV2: ContainerInsights.ENABLED })
      : new CfnCluster(this, 'Cluster', { clusterSettings: [{ name: 'containerInsights', value: 'enabled' }] });
    this.clusterArn = this.cluster instanceof Cluster ? this.cluster.clusterArn : this.cluster.attrArn;
    ({ taskDefinition: this.taskDefinition, container: this.container } = this.addTaskDefinition(props, stack));
    this.acknowledge();
  }

  private addShareStorage(props: CopyWorkerProps): ShareStorage {
    const network = addShareNetwork(this, props.logRetention, props.vpcApis ?? []);
    const { vpc, functionSecurityGroup, taskSecurityGroup } = network;
    const clients = [functionSecurityGroup, taskSecurityGroup];

    // --- share storage -------------------------------------------------------------------------
    const fileSystemSecurityGroup = new SecurityGroup(this, 'FileSystemSg', {
      vpc,
      description: 'Ferry share file system (NFS from the functions and the copy task only)',
      allowAllOutbound: false,
    });
    const fileSystem = new FileSystem(this, 'Shares', {
      vpc,
      vpcSubnets: this.subnets,
      securityGroup: fileSystemSecurityGroup,
      encrypted: true,
      performanceMode: PerformanceMode.GENERAL_PURPOSE,
      // Copies come in bursts far above what a small file system's bursting baseline gives;
      // elastic throughput is paid per GiB moved instead (see docs/aws.md for the cost).
      throughputMode: ThroughputMode.ELASTIC,
      enableAutomaticBackups: true,
      removalPolicy: props.removalPolicy,
    });
    for (const sg of clients) fileSystem.connections.allowDefaultPortFrom(sg, `NFS from ${sg.node.id}`);

    const accessPoint = fileSystem.addAccessPoint('SharesAccessPoint', {
      path: SHARE_ACCESS_POINT_PATH,
      // Root: the worker keeps the owners of copied files (fchown), and the functions (which run
      // as an unprivileged user) can still remove and re-mode what the worker wrote. Needs
      // elasticfilesystem:ClientRootAccess, granted below to exactly the functions and the task.
      posixUser: { uid: '0', gid: '0' },
      createAcl: { ownerUid: '0', ownerGid: '0', permissions: '755' },
    });

    return { ...network, fileSystem, accessPoint, vpcApis: props.vpcApis ?? [] };
  }

  private addTaskDefinition(props: CopyWorkerProps, stack: Stack): { taskDefinition: FargateTaskDefinition; container: ContainerDefinition } {
    const taskDefinition = new FargateTaskDefinition(this, 'TaskDefinition', {
      family: props.family,
      cpu: COPY_TASK_CPU,
      memoryLimitMiB: COPY_TASK_MEMORY_MIB,
      // Graviton, like the functions. The image builds its JavaScript on the build platform and
      // only copies it into the arm64 stage, so an x86 machine builds it without emulation.
      runtimePlatform: { cpuArchitecture: CpuArchitecture.ARM64, operatingSystemFamily: OperatingSystemFamily.LINUX },
    });
    const container = taskDefinition.addContainer('Container', {
      containerName: COPY_CONTAINER_NAME,
      // Only copies the build context into cdk.out at synth; Docker builds it at deploy.
      image: ContainerImage.fromAsset(props.assetDirectory, { file: COPY_DOCKERFILE, platform: Platform.LINUX_ARM64 }),
      essential: true,
      readonlyRootFilesystem: true,
      // ECS stops a task with SIGTERM, then SIGKILL after this; the journal makes a kill safe.
      stopTimeout: Duration.seconds(30),
      environment: {
        [props.shareTableEnv]: props.shareTable.tableName,
        AWS_REGION: stack.region,
        NODE_OPTIONS: '--enable-source-maps',
        POWERTOOLS_SERVICE_NAME: 'ferry-copy-worker',
      },
      logging: LogDrivers.awsLogs({
        streamPrefix: 'copy',
        logGroup: new LogGroup(this, 'TaskLogs', { retention: props.logRetention, removalPolicy: RemovalPolicy.DESTROY }),
      }),
    });
    if (this.storage) {
      // The share storage at SHARE_MOUNT_PATH, through the access point (TLS + IAM).
      const { fileSystem, accessPoint } = this.storage;
      taskDefinition.addVolume({ name: 'shares', efsVolumeConfiguration: { fileSystemId: fileSystem.fileSystemId, transitEncryption: 'ENABLED', authorizationConfig: { accessPointId: accessPoint.accessPointId, iam: 'ENABLED' } } });
      container.addMountPoints({ sourceVolume: 'shares', containerPath: SHARE_MOUNT_PATH, readOnly: false });
    }

    // The worker reads and conditionally updates its operation record (GetItem, UpdateItem), in
    // the share table only; no index, no scan, no delete.
    taskDefinition.taskRole.addToPrincipalPolicy(
      new PolicyStatement({ actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem'], resources: [props.shareTable.tableArn] }),
    );
    if (this.storage) this.grantMount(taskDefinition.taskRole);
    return { taskDefinition, container };
  }

  /** The cdk-nag acknowledgements a function that mounts the share storage needs (FerryStack adds them). */
  static readonly FUNCTION_ACKNOWLEDGEMENTS: Readonly<Record<string, string>> = {
    'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]':
      'AWSLambdaVPCAccessExecutionRole only allows managing the function\'s own VPC network interfaces (ec2:CreateNetworkInterface and friends, which have no resource-level permissions); it is the AWS-maintained minimum for a Lambda in a VPC, which the EFS mount requires.',
    'AwsSolutions-IAM5[Resource::*]':
      'X-Ray tracing (xray:PutTraceSegments, xray:PutTelemetryRecords) has no resource-level permissions; elasticfilesystem:ClientMount is written with `*` by lambda.FileSystem.fromEfsAccessPoint but conditioned on the share access point ARN.',
  };

  /** What a function that mounts the share file system gives its Lambda (VPC, group, mount); nothing without the share storage. */
  functionProps(): { vpc: Vpc; vpcSubnets: SubnetSelection; securityGroups: SecurityGroup[]; filesystem: LambdaFileSystem } | Record<string, never> {
    if (!this.storage) return {};
    return {
      vpc: this.storage.vpc,
      vpcSubnets: this.subnets,
      securityGroups: [this.storage.functionSecurityGroup],
      filesystem: LambdaFileSystem.fromEfsAccessPoint(this.storage.accessPoint, SHARE_MOUNT_PATH),
    };
  }

  /** The FERRY_COPY_* variables: what the share-steps function needs to build RunTask parameters. */
  functionEnvironment(): Record<string, string> {
    return {
      [COPY_ENV.cluster]: this.clusterArn,
      [COPY_ENV.taskDefinition]: this.taskDefinition.taskDefinitionArn,
      [COPY_ENV.container]: COPY_CONTAINER_NAME,
      // Where a task that mounts the share storage runs; a migration's own revision runs in its backends' subnets.
      ...(this.storage
        ? { [COPY_ENV.subnets]: Fn.join(',', this.storage.vpc.selectSubnets(this.subnets).subnetIds), [COPY_ENV.securityGroups]: Fn.join(',', [this.storage.taskSecurityGroup.securityGroupId]) }
        : {}),
      ...(this.storage && !this.storage.vpcApis.includes('ecs') ? { [COPY_ENV.migrationFamilies]: 'false' } : {}),
    };
  }

  /** What a function with `registersCopyTasks` adds to functionEnvironment(). */
  registrarEnvironment = (): Record<string, string> => ({ [COPY_REGISTRAR_ENV.taskRole]: this.taskDefinition.taskRole.roleArn, ...(this.storage ? { [COPY_REGISTRAR_ENV.vpcId]: this.storage.vpc.vpcId } : {}) });

  /**
   * Mount, write and act as root on the share file system, through the access point only.
   * (lambda.FileSystem.fromEfsAccessPoint grants mount and write; the access point's uid 0 also
   * needs ClientRootAccess.)
   */
  grantMount(grantee: IGrantable): void {
    if (!this.storage) throw new Error('the copy worker has no share storage to mount (CopyWorkerProps.shareStorage is false)');
    grantee.grantPrincipal.addToPrincipalPolicy(
      new PolicyStatement({
        actions: EFS_CLIENT_ACTIONS,
        resources: [this.storage.fileSystem.fileSystemArn],
        conditions: { StringEquals: { 'elasticfilesystem:AccessPointArn': this.storage.accessPoint.accessPointArn } },
      }),
    );
  }

  /** The task definition family ARN with any revision: what RunTask is allowed on (and, with `migrations`, the migrations' own families). */
  taskDefinitionFamilyArn(migrations = false): string {
    const family = migrations ? `${this.taskDefinition.family}${MIGRATION_FAMILY_SUFFIX}*` : this.taskDefinition.family;
    return Stack.of(this).formatArn({ service: 'ecs', resource: 'task-definition', resourceName: `${family}:*`, arnFormat: ArnFormat.SLASH_RESOURCE_NAME });
  }

  /**
   * What a state machine needs to run the task with `ecs:runTask.sync`, as the Step Functions
   * guide's policy for "Run a Job (.sync)" on ECS/Fargate states it, plus iam:PassRole on the
   * task's two roles (RunTask hands them to ECS).
   */
  grantRunTaskSync(machine: StateMachine): void {
    const stack = Stack.of(this);
    machine.addToRolePolicy(new PolicyStatement({ actions: ['ecs:RunTask'], resources: [this.taskDefinitionFamilyArn(), this.taskDefinitionFamilyArn(true)] }));
    machine.addToRolePolicy(new PolicyStatement({ actions: ['ecs:StopTask', 'ecs:DescribeTasks'], resources: ['*'] }));
    machine.addToRolePolicy(
      new PolicyStatement({ actions: ['iam:PassRole'], resources: [this.taskDefinition.taskRole.roleArn, this.taskDefinition.obtainExecutionRole().roleArn] }),
    );
    machine.addToRolePolicy(
      new PolicyStatement({
        actions: ['events:PutTargets', 'events:PutRule', 'events:DescribeRule'],
        resources: [stack.formatArn({ service: 'events', resource: 'rule', resourceName: ECS_TASK_EVENTS_RULE })],
      }),
    );
    const v = Validations.of(machine);
    v.acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task-definition/${this.taskDefinition.family}:*]`,
      reason: 'ecs:RunTask on every revision of the copy worker task definition family only; the revision changes with each image, and the function passes the current one.',
    });
    v.acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task-definition/${this.taskDefinition.family}${MIGRATION_FAMILY_SUFFIX}*:*]`,
      reason: 'ecs:RunTask on the copy task definitions registered per migration (family <copy family>-m-<migration id>, made at run time by the migration steps, with the mounts of that migration\'s EFS shares).',
    });
    v.acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'X-Ray and CloudWatch Logs delivery actions have no resource-level permissions; ecs:StopTask and ecs:DescribeTasks are `*` as the Step Functions guide writes them for runTask.sync: task ids are unknown before RunTask, and Step Functions can only stop tasks it started.',
    });
  }

  private acknowledge(): void {
    const taskDefinition = Validations.of(this.taskDefinition);
    taskDefinition.acknowledge({
      id: 'AwsSolutions-ECS2',
      reason: 'The container environment holds only the share table name, the region and Node options (no secret); per-copy values come as RunTask overrides.',
    });
    taskDefinition.acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'The execution role pulls the image: ecr:GetAuthorizationToken has no resource-level permissions (CDK writes it with `*`); the pull itself is scoped to the asset repository.',
    });
  }
}

/**
 * The whole AWS deployment, generated from the one wiring table (functions/wiring.ts) and the
 * table list (functions/core/tables.ts). Nothing here names a function, a table or a state
 * machine: add an entry there and it appears here (and in the local stack) on the next synth.
 *
 * Synth is offline: NodejsFunction bundles with the repository's esbuild (no Docker), the ASL
 * files are read from disk, and nothing looks up context from an account.
 *
 * Beside it: the HTTP API (http-api.ts), the share storage and copy task (copy-worker.ts), and the
 * cdk-nag findings accepted with their reasons (acknowledgements.ts). The ASL files are deployed
 * as they are; their retry and timeout policy is infra/asl/policy.ts (checked by test/infra).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { App, ArnFormat, CfnOutput, Duration, RemovalPolicy, Size, Stack, Validations, type StackProps } from 'aws-cdk-lib';
import type { HttpApi } from 'aws-cdk-lib/aws-apigatewayv2';
import { AttributeType, BillingMode, Table, TableEncryption } from 'aws-cdk-lib/aws-dynamodb';
import { Rule, Schedule } from 'aws-cdk-lib/aws-events';
import { LambdaFunction } from 'aws-cdk-lib/aws-events-targets';
import { PolicyStatement } from 'aws-cdk-lib/aws-iam';
import { Architecture, Runtime, Tracing, type IFunction } from 'aws-cdk-lib/aws-lambda';
import { NodejsFunction, OutputFormat, type BundlingOptions } from 'aws-cdk-lib/aws-lambda-nodejs';
import { LogGroup, RetentionDays } from 'aws-cdk-lib/aws-logs';
import { BlockPublicAccess, Bucket, BucketEncryption, ObjectOwnership } from 'aws-cdk-lib/aws-s3';
import { DefinitionBody, LogLevel, StateMachine } from 'aws-cdk-lib/aws-stepfunctions';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { Construct } from 'constructs';
import { acknowledgeFunction, acknowledgeStateMachine, type AcknowledgementScope } from './acknowledgements.js';
import { grantAuditCopyTasks, grantRegisterCopyTasks } from './copy-task-grants.js';
import { CopyWorker, RUN_TASK_SYNC, shareBackendsFromContext } from './copy-worker.js';
import { grantDriverPermissions } from './share-driver-permissions.js';
import { addInventoryResource, inventoryForDeploy, shareBackendsFor } from './inventory-resource.js';
import type { Inventory } from '../../functions/inventory/schema.js';
import { addHttpApi } from './http-api.js';
import { addIdentityBootstrap } from './identity-bootstrap.js';
import { deployFunction } from './deploy-resources.js';
import { addMachineSchedules } from './machine-schedules.js';
import { addMonitoring } from './monitoring.js';
import { vpcApisFor } from './share-network.js';
import { RUNTIME_SDK_MODULES } from './sdk-bundling.js';
import { GSI1, TABLES, TTL_ATTRIBUTE, tableEnvName, type TableKey } from '../../functions/core/tables.js';
import { FUNCTIONS, STATE_MACHINES, stateMachineEnvName, substitutionKey, type FunctionWiring, type StateMachineWiring } from '../../functions/wiring.js';

/** The repository root: entries and ASL files in the wiring table are relative to it. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Lambda defaults for wiring entries that do not set their own. */
export const DEFAULT_TIMEOUT_SECONDS = 30;
export const DEFAULT_MEMORY_MB = 512;
/** Every function runs on this runtime; the code stays runnable on the local Node 20. */
export const LAMBDA_RUNTIME = Runtime.NODEJS_22_X;
/** How long logs (functions, machines, API access) are kept. */
export const LOG_RETENTION = RetentionDays.ONE_MONTH;
/** Objects under this prefix (temporary snapshots, staging) are expired by a lifecycle rule. */
export const TMP_PREFIX = 'tmp/';
export const TMP_EXPIRATION_DAYS = 7;

/** The env var that holds the bucket name for functions with `usesBucket`. */
export const BUCKET_ENV = 'FERRY_BUCKET';
/** The authorizer checks tokens against the token table on AWS (noauth is for the local stack only). */
export const AUTH_MODE_ENV = 'FERRY_AUTH_MODE';

/** ESM bundles have no `require`; bundled CJS dependencies still call it: the banner makes one from the bundle's URL. */
export const ESM_REQUIRE_BANNER = "import { createRequire as __ferryCreateRequire } from 'node:module'; const require = __ferryCreateRequire(import.meta.url);";

/**
 * How every function is bundled. `keepNames`: an error's `name` is its class name (errors.ts), and
 * the state machines' Retry and Catch match on it (`DriverError`, `ConcurrentModification`,
 * `BackendNotReady`); minified without it, a class is renamed and no retrier would ever match.
 */
export const LAMBDA_BUNDLING: BundlingOptions = {
  format: OutputFormat.ESM,
  target: 'node22',
  mainFields: ['module', 'main'],
  banner: ESM_REQUIRE_BANNER,
  sourceMap: true,
  minify: true,
  keepNames: true,
  // DynamoDB's SDK is bundled (every request needs it); the clients loaded on first use come from the runtime.
  externalModules: RUNTIME_SDK_MODULES,
};

export { AUTH_HEADER } from './http-api.js';

export interface FerryStackProps extends StackProps {
  /**
   * What happens to the tables and the buckets when the stack is deleted.
   * @default RemovalPolicy.RETAIN (data outlives the stack; context `removalPolicy=destroy` for sandboxes)
   */
  readonly removalPolicy?: RemovalPolicy;
  /**
   * The functions and machines to deploy. Tests pass a fixture here; the app never does.
   * @default the wiring table (functions/wiring.ts FUNCTIONS and STATE_MACHINES)
   */
  readonly wiring?: FerryWiring;
  /** Applied at deploy time by the wiring's `deploy` function (context `inventory=FILE`). @default none */
  readonly inventory?: Inventory;
  /**
   * Whether the deployment has share backends. When false the stack has no share storage and no
   * copy worker (no VPC, EFS, interface endpoints, ECS); the share functions deploy outside any VPC.
   * @default context `shareBackends`, else true
   */
  readonly shareBackends?: boolean;
  /** Whether a share backend can take part in a host-assisted migration (the copy worker; without `shareBackends` no share storage). @default `shareBackends` */
  readonly hostAssistedMigration?: boolean;
}

/** What the stack is generated from: the wiring table, or a test's fixture of the same shape. */
export interface FerryWiring {
  readonly functions: readonly FunctionWiring[];
  readonly stateMachines: readonly StateMachineWiring[];
}

const pascal = (name: string) => substitutionKey(name).slice(2);

export class FerryStack extends Stack implements AcknowledgementScope {
  readonly tables = new Map<TableKey, Table>();
  readonly functions = new Map<string, NodejsFunction>();
  readonly stateMachines = new Map<string, StateMachine>();
  readonly bucket: Bucket;
  readonly httpApi?: HttpApi;
  /** The share storage (VPC, EFS) and the copy task; only when a function or a machine needs them. */
  readonly copyWorker?: CopyWorker;
  readonly shareBackends: boolean;
  readonly hostAssistedMigration: boolean;
  /** What `cdk deploy -c inventory=FILE` applies at deploy time, as validated. */
  readonly inventory?: Inventory;
  readonly wiring: FerryWiring;

  constructor(scope: Construct, id: string, props: FerryStackProps = {}) {
    super(scope, id, props);
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    this.wiring = props.wiring ?? { functions: FUNCTIONS, stateMachines: STATE_MACHINES };
    this.shareBackends = props.shareBackends ?? shareBackendsFromContext(this);
    this.hostAssistedMigration = props.hostAssistedMigration ?? this.shareBackends;
    this.inventory = props.inventory;

    for (const t of TABLES) this.tables.set(t.key, this.addTable(t.key, removalPolicy));
    this.bucket = this.addBucket(removalPolicy);
    // Before the functions: those that mount the share storage need the VPC and the access point.
    this.copyWorker = this.addCopyWorker(removalPolicy);
    for (const f of this.wiring.functions) this.functions.set(f.name, this.addFunction(f));
    for (const m of this.wiring.stateMachines) this.stateMachines.set(m.name, this.addStateMachine(m));
    addMachineSchedules(this, this.wiring.stateMachines, (name) => this.stateMachines.get(name)!);
    this.httpApi = addHttpApi(this, this.wiring.functions, this.functions, LOG_RETENTION);
    if (props.inventory) addInventoryResource(this, deployFunction(this, 'inventory', 'an inventory')!, props.inventory, LOG_RETENTION);
    const identity = deployFunction(this, 'identity');
    if (identity) addIdentityBootstrap(this, identity, removalPolicy);

    for (const [key, table] of this.tables) new CfnOutput(this, `TableName${pascal(key)}`, { value: table.tableName, description: tableEnvName(key) });
    new CfnOutput(this, 'BucketName', { value: this.bucket.bucketName, description: BUCKET_ENV });
    if (this.copyWorker) {
      if (this.copyWorker.storage) new CfnOutput(this, 'ShareFileSystemId', { value: this.copyWorker.storage.fileSystem.fileSystemId, description: 'EFS file system of the share backends (mounted at /mnt/ferry-shares)' });
      new CfnOutput(this, 'CopyClusterArn', { value: this.copyWorker.clusterArn, description: 'ECS cluster of the copy worker (FERRY_COPY_CLUSTER)' });
      new CfnOutput(this, 'CopyTaskDefinitionArn', { value: this.copyWorker.taskDefinition.taskDefinitionArn, description: 'Fargate task definition of the copy worker (FERRY_COPY_TASK_DEFINITION)' });
    }
    addMonitoring(this);
  }

  private addTable(key: TableKey, removalPolicy: RemovalPolicy): Table {
    const table = new Table(this, `Table${pascal(key)}`, {
      partitionKey: { name: 'pk', type: AttributeType.STRING },
      sortKey: { name: 'sk', type: AttributeType.STRING },
      billingMode: BillingMode.PAY_PER_REQUEST,
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: TableEncryption.AWS_MANAGED,
      timeToLiveAttribute: TTL_ATTRIBUTE,
      removalPolicy,
    });
    table.addGlobalSecondaryIndex({ indexName: GSI1, partitionKey: { name: 'gsi1pk', type: AttributeType.STRING }, sortKey: { name: 'gsi1sk', type: AttributeType.STRING } });
    return table;
  }

  private addBucket(removalPolicy: RemovalPolicy): Bucket {
    const common = {
      blockPublicAccess: BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      // Server access logs can only be delivered to an SSE-S3 bucket, so both use S3-managed keys.
      encryption: BucketEncryption.S3_MANAGED,
      objectOwnership: ObjectOwnership.BUCKET_OWNER_ENFORCED,
      removalPolicy,
    };
    // cdk-nag's S1 (access logging) does not apply to a bucket that is itself a log destination.
    const logBucket = new Bucket(this, 'AccessLogBucket', { ...common, lifecycleRules: [{ id: 'expire-access-logs', expiration: Duration.days(365) }] });
    return new Bucket(this, 'Bucket', {
      ...common,
      versioned: true,
      serverAccessLogsBucket: logBucket,
      serverAccessLogsPrefix: 'ferry-bucket/',
      lifecycleRules: [
        {
          id: 'expire-tmp',
          prefix: TMP_PREFIX,
          expiration: Duration.days(TMP_EXPIRATION_DAYS),
          noncurrentVersionExpiration: Duration.days(1),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
        // Versioning protects against overwrites; old versions of everything else still go eventually.
        { id: 'expire-noncurrent', noncurrentVersionExpiration: Duration.days(30) },
      ],
    });
  }

  private addFunction(f: FunctionWiring): NodejsFunction {
    const entry = resolve(REPO_ROOT, f.entry);
    if (!existsSync(entry)) {
      throw new Error(`functions/wiring.ts: function ${f.name} has entry ${f.entry}, which does not exist. Write the module or fix the entry.`);
    }
    const environment: Record<string, string> = { NODE_OPTIONS: '--enable-source-maps', POWERTOOLS_SERVICE_NAME: `ferry-${f.name}` };
    for (const key of f.tables) environment[tableEnvName(key)] = this.table(key, f.name).tableName;
    for (const machine of [...(f.starts ?? []), ...(f.describes ?? [])]) environment[stateMachineEnvName(machine)] = this.stateMachineArn(machine);
    if (f.usesBucket) environment[BUCKET_ENV] = this.bucket.bucketName;
    if (f.kind === 'authorizer') environment[AUTH_MODE_ENV] = 'token';
    // Without share backends there is nothing to mount: the function deploys outside any VPC.
    const copyWorker = f.mountsShareStorage && this.hostAssistedMigration ? this.requireCopyWorker(`function ${f.name} has mountsShareStorage`) : undefined;
    if (copyWorker) Object.assign(environment, copyWorker.functionEnvironment(), f.registersCopyTasks ? copyWorker.registrarEnvironment() : {});

    const id = `Fn${pascal(f.name)}`;
    const fn = new NodejsFunction(this, id, {
      entry,
      handler: f.export,
      description: f.description.slice(0, 256),
      runtime: LAMBDA_RUNTIME,
      architecture: Architecture.ARM_64,
      timeout: Duration.seconds(f.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS),
      memorySize: f.memoryMb ?? DEFAULT_MEMORY_MB,
      ...(f.ephemeralStorageMb ? { ephemeralStorageSize: Size.mebibytes(f.ephemeralStorageMb) } : {}),
      tracing: Tracing.ACTIVE,
      environment,
      // In the VPC with the share file system mounted at /mnt/ferry-shares (see copy-worker.ts).
      ...copyWorker?.functionProps(),
      logGroup: new LogGroup(this, `${id}Logs`, { retention: LOG_RETENTION, removalPolicy: RemovalPolicy.DESTROY }),
      projectRoot: REPO_ROOT,
      depsLockFilePath: resolve(REPO_ROOT, 'package-lock.json'),
      bundling: LAMBDA_BUNDLING,
    });

    const grantTable = f.readsTablesOnly ? (t: Table) => t.grantReadData(fn) : (t: Table) => t.grantReadWriteData(fn);
    for (const key of f.tables) grantTable(this.table(key, f.name));
    if (f.usesBucket) this.bucket.grantReadWrite(fn, f.bucketPrefix ? `${f.bucketPrefix}*` : '*');
    if (copyWorker?.storage) copyWorker.grantMount(fn);
    if (copyWorker && f.registersCopyTasks) grantRegisterCopyTasks(copyWorker, fn);
    if (copyWorker && f.auditsCopyTasks) grantAuditCopyTasks(fn);
    grantDriverPermissions(fn, f);
    const starts = f.starts ?? [];
    if (starts.length) {
      // One statement per action with every machine as a resource: the compute API starts a dozen
      // machines, and a statement each would overflow the role's inline policy size limit.
      fn.addToRolePolicy(new PolicyStatement({ actions: ['states:StartExecution'], resources: starts.map((m) => this.stateMachineArn(m)) }));
      fn.addToRolePolicy(new PolicyStatement({ actions: ['states:DescribeExecution'], resources: starts.map((m) => this.executionArns(m)) }));
    }
    const described = (f.describes ?? []).filter((m) => !starts.includes(m));
    if (described.length) fn.addToRolePolicy(new PolicyStatement({ actions: ['states:DescribeExecution'], resources: described.map((m) => this.executionArns(m)) }));
    if (f.kind === 'scheduled') this.addSchedule(f, fn, id);
    acknowledgeFunction(this, fn, f);
    return fn;
  }

  /**
   * A `scheduled` function runs from an EventBridge rule at its rate. A failed run is not retried
   * (the next one comes within the rate, and a run that failed on a dependency would likely fail
   * again): its error shows in the function's Errors metric and its log.
   */
  private addSchedule(f: FunctionWiring, fn: NodejsFunction, id: string): void {
    if (!f.scheduleRateMinutes) throw new Error(`functions/wiring.ts: scheduled function ${f.name} needs scheduleRateMinutes.`);
    fn.configureAsyncInvoke({ retryAttempts: 0 });
    new Rule(this, `${id}Schedule`, {
      description: `Runs ${f.name} every ${f.scheduleRateMinutes} minutes`,
      schedule: Schedule.rate(Duration.minutes(f.scheduleRateMinutes)),
      targets: [new LambdaFunction(fn, { retryAttempts: 0 })],
    });
  }

  private addStateMachine(m: StateMachineWiring): StateMachine {
    const file = resolve(REPO_ROOT, m.file);
    if (!existsSync(file)) {
      throw new Error(`functions/wiring.ts: state machine ${m.name} has file ${m.file}, which does not exist. Write the ASL file or fix the entry.`);
    }
    const definitionSubstitutions: Record<string, string> = {};
    const invoked: IFunction[] = [];
    for (const name of m.functions) {
      const fn = this.functions.get(name);
      if (!fn) throw new Error(`functions/wiring.ts: state machine ${m.name} lists function ${name}, which is not in FUNCTIONS.`);
      definitionSubstitutions[substitutionKey(name)] = fn.functionArn;
      invoked.push(fn);
    }
    const id = `Sm${pascal(m.name)}`;
    const machine = new StateMachine(this, id, {
      // A fixed name gives a known ARN, so the functions that start it can get it in their
      // environment without a reference (which would form a cycle if a step ever starts a machine).
      stateMachineName: this.stateMachineName(m.name),
      comment: m.description,
      definitionBody: DefinitionBody.fromFile(file),
      definitionSubstitutions,
      tracingEnabled: true,
      logs: {
        destination: new LogGroup(this, `${id}Logs`, {
          // Step Functions wants its vended-log groups under /aws/vendedlogs/ (resource policy size limits).
          logGroupName: `/aws/vendedlogs/states/${this.stateMachineName(m.name)}`,
          retention: LOG_RETENTION,
          removalPolicy: RemovalPolicy.DESTROY,
        }),
        level: LogLevel.ALL,
        includeExecutionData: true,
      },
    });
    for (const fn of invoked) fn.grantInvoke(machine);
    // Without share backends no migration can reach the copy step, so the machine gets no RunTask rights.
    if (this.hostAssistedMigration && readFileSync(file, 'utf8').includes(RUN_TASK_SYNC)) {
      this.requireCopyWorker(`state machine ${m.name} uses ${RUN_TASK_SYNC}`).grantRunTaskSync(machine);
    }
    acknowledgeStateMachine(machine, invoked);
    return machine;
  }

  /**
   * The share storage (VPC, EFS) and the copy worker's Fargate task (infra/aws/copy-worker.ts),
   * when the deployment has share backends and the wiring asks for them: a function with
   * `mountsShareStorage`, or a machine whose ASL runs `ecs:runTask.sync`. Those machines get the
   * run permissions in addStateMachine; the task parameters reach them at run time from a step
   * function (FERRY_COPY_*; migration-steps), not as substitutions. ContainerImage.fromAsset only
   * copies the build context at synth, so synth stays Docker-free; Docker builds the image at deploy.
   */
  private addCopyWorker(removalPolicy: RemovalPolicy): CopyWorker | undefined {
    const runsTask = (file: string) => existsSync(file) && readFileSync(file, 'utf8').includes(RUN_TASK_SYNC);
    const needed = this.hostAssistedMigration && (this.wiring.functions.some((f) => f.mountsShareStorage) || this.wiring.stateMachines.some((m) => runsTask(resolve(REPO_ROOT, m.file))));
    if (!needed) return undefined;
    return new CopyWorker(this, 'CopyWorker', {
      shareTable: this.table('share', 'copy-worker'),
      shareTableEnv: tableEnvName('share'),
      assetDirectory: REPO_ROOT,
      family: `${this.stackName}-copy-worker`,
      removalPolicy,
      logRetention: LOG_RETENTION,
      shareStorage: this.shareBackends,
      // The interface endpoints the inventory's backends make the functions in the VPC call (share-network.ts).
      vpcApis: vpcApisFor(this.inventory),
    });
  }

  private requireCopyWorker(why: string): CopyWorker {
    if (!this.copyWorker) throw new Error(`functions/wiring.ts: ${why}, but the stack has no copy worker.`);
    return this.copyWorker;
  }

  table(key: TableKey, user: string): Table {
    const t = this.tables.get(key);
    if (!t) throw new Error(`functions/wiring.ts: function ${user} uses table ${key}, which is not in functions/core/tables.ts TABLES.`);
    return t;
  }

  stateMachineName(name: string): string {
    return `${this.stackName}-${name}`;
  }

  stateMachineArn(name: string): string {
    return this.formatArn({ service: 'states', resource: 'stateMachine', resourceName: this.stateMachineName(name), arnFormat: ArnFormat.COLON_RESOURCE_NAME });
  }

  private executionArns(name: string): string {
    return this.formatArn({ service: 'states', resource: 'execution', resourceName: `${this.stateMachineName(name)}:*`, arnFormat: ArnFormat.COLON_RESOURCE_NAME });
  }
}

const S3_LOGS_BY_POLICY = '@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy';

export interface BuildOptions {
  /** Stack name. @default 'Ferry' */
  stackName?: string;
  /** Apply cdk-nag's AwsSolutionsChecks as a validation plugin (fails synth on unacknowledged errors). @default true */
  nag?: boolean;
  /** Deploy this instead of the wiring table (tests). @default the wiring table */
  wiring?: FerryWiring;
}

/**
 * The app `cdk synth` runs (infra/aws/app.ts) and the tests synth in-process. Context:
 * `removalPolicy` = `retain` (default) | `destroy`; `inventory` = an inventory file applied at
 * deploy time (relative to the working directory).
 */
export function buildFerryApp(app: App = new App(), options: BuildOptions = {}): { app: App; stack: FerryStack } {
  // Access logs are delivered by a bucket policy rather than the legacy LogDelivery ACL, which
  // bucket-owner-enforced ownership forbids. A feature flag, set here so tests and the CLI agree.
  if (app.node.tryGetContext(S3_LOGS_BY_POLICY) === undefined) app.node.setContext(S3_LOGS_BY_POLICY, true);
  const policy = String(app.node.tryGetContext('removalPolicy') ?? 'retain').toLowerCase();
  if (policy !== 'retain' && policy !== 'destroy') throw new Error(`context removalPolicy must be retain or destroy, not ${policy}`);
  const inventoryFile = app.node.tryGetContext('inventory') as string | undefined;
  const inventory = inventoryFile ? inventoryForDeploy(resolve(inventoryFile)) : undefined;
  const stack = new FerryStack(app, options.stackName ?? 'Ferry', {
    description: 'Ferry: Cinder/Manila/Nova move operations as serverless functions',
    removalPolicy: policy === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
    wiring: options.wiring,
    // Every share backend kind takes part in host-assisted migration (to or from another kind, or forced).
    ...(inventory ? { inventory, shareBackends: shareBackendsFor(app, inventory), hostAssistedMigration: inventory.shareBackends.length > 0 } : {}),
  });
  if (options.nag ?? true) Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  return { app, stack };
}

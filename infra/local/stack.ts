/**
 * The embedded local stack behind `npm start`: DynamoDB Local, s3rver, the local Step Functions
 * and the HTTP server, all with their data under one directory, so a stop and a start on the same
 * directory keep every table, object and execution.
 *
 * It points the process's functions at these services through the same environment variables the
 * functions read on AWS (FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT, FERRY_BUCKET,
 * FERRY_SFN_ENDPOINT), so the handlers run unchanged.
 */
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { setDb } from '../../functions/core/db.js';
import { ConfigurationError } from '../../functions/core/errors.js';
import { setSfn } from '../../functions/core/executions.js';
import { setS3 } from '../../functions/core/s3.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { getBackendRecord, recordReplicationLag, listBackends } from '../../functions/volumes/backends.js';
import { FUNCTIONS, type FunctionWiring, type StateMachineWiring } from '../../functions/wiring.js';
import { acquireDataDirLock, removeOwnStackFile, writeStackFile, type DataDirLock } from './data-dir-lock.js';
import { createTables, startDynamo, waitForDynamo, type DynamoProcess, type LocalDynamo } from './dynamo.js';
import { DYNAMO_SUBDIR } from './dynamo-process.js';
import type { ClassArchiveState } from './dynamo-cds.js';
import { WRITER_STOP_DEADLINE_S } from './dynamo-cds-writer.js';
import { NO_STAGES, type StartStages } from './start-stages.js';
import { STEP_FUNCTIONS_PATH, startHttpServer } from './http.js';
import { startReplicationLoop } from './replicator.js';
import { seedSandbox } from './sandbox.js';
import { seedUsers, writeCloudsYaml } from './clouds.js';
import { ECS_RUN_TASK_SYNC, LocalStepFunctions, type TaskIntegration } from './stepfunctions.js';
import { copyTaskIntegration } from './copy-task.js';
import { stopOrphanedDynamo } from './orphaned-dynamo.js';
import { reconcileOnce, reconcileSchedule, startReconcileLoop, logReconcile, type Reconcile, type ReconcileEvent, type ReconcileLoop, type ReconcileSchedule } from './reconcile-loop.js';

const require = createRequire(import.meta.url);

export const LOCAL_BUCKET = 'ferry-local';
export { DataDirInUse, STACK_FILE } from './data-dir-lock.js';

export interface LocalStackOptions {
  dataDir: string;
  /** 0 = a free port chosen by the kernel. */
  port?: number;
  /** No warnings or request errors on the console. */
  quiet?: boolean;
  /** Default: FUNCTIONS of the wiring table (tests add fixture functions). */
  functions?: readonly FunctionWiring[];
  /** Default: STATE_MACHINES of the wiring table (tests run fixture machines). */
  machines?: readonly StateMachineWiring[];
  /** Task integrations other than Lambda, by resource ARN (see TaskIntegration). */
  integrations?: Record<string, TaskIntegration>;
  /**
   * The data directory's lock, when the caller took it already (main.ts does, before the stack's
   * modules load, so that a second start fails fast); else the stack takes it. Released on stop.
   */
  lock?: DataDirLock;
  /** The reconciler's timer; default FERRY_RECONCILE_INTERVAL / FERRY_RECONCILE_GRACE (the run at start always happens). */
  reconcile?: Partial<ReconcileSchedule>;
  /** Default: functions/audit/reconciler.ts `reconcile` (tests observe when it runs). */
  reconciler?: Reconcile;
  /** The inventory file applied at start; default FERRY_INVENTORY, else inventories/sandbox.yaml. */
  inventory?: string;
  /**
   * DynamoDB Local on `<dataDir>/dynamodb`, launched by the caller but not yet answering: main.ts
   * launches the JVM before the stack's modules load, so the two start side by side. The stack
   * owns it from here (stops it, also when the start fails). Default: the stack starts one.
   */
  dynamo?: DynamoProcess;
  /** A line per stage while starting (start-stages.ts); default none. */
  stages?: StartStages;
}

export interface LocalStack {
  url: string;
  port: number;
  dataDir: string;
  /** `<dataDir>/clouds.yaml`: the clouds ferry-admin and ferry-demo for the openstack CLI (clouds.ts). */
  cloudsYaml: string;
  /**
   * The start's reconcile pass, run once the server answers: settles with what it did (or that a
   * stop interrupted it) once it has ended and the previous process's executions have resumed.
   * Rejects only when resuming them failed.
   */
  reconciled: Promise<ReconcileEvent>;
  stop(): Promise<void>;
}

interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
  httpServer?: { closeAllConnections(): void };
}

/** A service of the stack that stops. */
interface Running {
  stop(): Promise<void>;
}

export async function startLocalStack(options: LocalStackOptions): Promise<LocalStack> {
  const dataDir = resolve(options.dataDir);
  const startedAt = new Date();
  const schedule = reconcileSchedule(options.reconcile);
  const reconciler = options.reconciler ?? reconcile;
  const stages = options.stages ?? NO_STAGES;
  mkdirSync(dataDir, { recursive: true });
  // Before anything touches the directory: a second start on it throws DataDirInUse here, having
  // started nothing (so nothing to stop).
  const lock = options.lock ?? acquireDataDirLock(dataDir);
  if (resolve(lock.dataDir) !== dataDir) {
    await options.dynamo?.stop();
    throw new ConfigurationError(`the lock given is on ${lock.dataDir}, not on the stack's data directory ${dataDir}`);
  }
  // Released last (stops run in reverse), after everything on the directory has stopped.
  const stops: (() => Promise<void>)[] = [async () => void lock.release()];
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop();
    stops.length = 0;
    // Clients cached for this stack point at ports that are gone now.
    setDb(undefined);
    setS3(undefined);
    setSfn(undefined);
  };

  try {
    // DynamoDB Local (the JVM: seconds), s3rver and the state machines start side by side. Each
    // registers its stop at once, so a start that fails anywhere stops what did start; a stop of
    // one that failed to start has nothing to do (its own start stopped it, and its error is the
    // one the awaits below throw).
    const launched = options.dynamo;
    const dynamoStarting = launched ? dynamoAnswering(launched, stages) : stages.run('DynamoDB Local', () => startOwnDynamo(dataDir));
    // The JVM given is stopped whatever happened to it since (a stop of an exited one returns at once).
    stops.push(launched ? () => launched.stop() : async () => (await settledValue(dynamoStarting))?.stop());
    const s3Starting = stages.run('S3', () => startS3(dataDir));
    stops.push(async () => (await settledValue(s3Starting))?.stop());

    const functions = options.functions ?? FUNCTIONS;
    const copyTasks = copyTaskIntegration({ logDir: join(dataDir, 'copy-tasks'), quiet: options.quiet });
    // Synchronous (parsing and validating ASL): the JVM starts meanwhile in its own process.
    const stepFunctions = await stages.run(
      'state machines',
      () =>
        new LocalStepFunctions({
          dataDir,
          functions,
          ...(options.machines ? { machines: options.machines } : {}),
          integrations: { [ECS_RUN_TASK_SYNC]: copyTasks, ...options.integrations },
          quiet: options.quiet,
        }),
    );
    stops.push(async () => {
      // stop() aborts every execution at once (they resume on the next start), then waits for work
      // in flight; the copy workers of those executions are stopped meanwhile, not waited for.
      const stopping = stepFunctions.stop();
      await copyTasks.stop();
      await stopping;
    });

    const [dynamo, s3] = await Promise.all([dynamoStarting, s3Starting]);

    process.env.FERRY_DYNAMODB_ENDPOINT = dynamo.endpoint;
    process.env.FERRY_S3_ENDPOINT = s3.endpoint;
    process.env.FERRY_BUCKET = LOCAL_BUCKET;
    process.env.FERRY_AUTH_MODE = 'noauth';
    process.env.FERRY_DATA_DIR = dataDir;
    setDb(undefined);
    setS3(undefined);
    setSfn(undefined);

    // The admin and demo users (the token table: nothing the inventory or the reconcile touches),
    // seeded beside the inventory; awaited before the stack answers, with clouds.yaml written once the
    // server's URL is known. Caught here so a start failing elsewhere first leaves no unhandled rejection.
    const users = stages.run('identity', () => seedUsers(dataDir));
    users.catch(() => undefined);

    await stages.run('inventory', () => seedSandbox(dataDir, { file: options.inventory, log: options.quiet ? undefined : (line) => console.log(line) }));

    const server = await stages.run('HTTP', () => startHttpServer({ port: options.port ?? 0, functions, stepFunctions, quiet: options.quiet }));
    // The server closes first (stops run in reverse), so no new request starts an execution while executions stop.
    stops.push(() => server.close());
    process.env.FERRY_SFN_ENDPOINT = server.url + STEP_FUNCTIONS_PATH;
    setSfn(undefined);

    // The clouds.yaml naming the users (its URLs need the server's port).
    const cloudsYaml = writeCloudsYaml(dataDir, server.url, await users);

    // Replicated local backends copy changed chunks to their targets every
    // FERRY_REPLICATION_INTERVAL_MS. Backends and their active site are read on every tick, so a
    // failover or a backend added while the stack runs is followed without a restart.
    const replication = startReplicationLoop({
      backends: async () => {
        const replicated = (await listBackends()).filter((b) => b.driver === 'local' && b.replicationDevices?.length);
        const out = [];
        for (const b of replicated) {
          const record = await getBackendRecord(b.host);
          out.push({ config: record.config, activeBackendId: record.service.activeBackendId ?? '', replicationStatus: record.service.replicationStatus });
        }
        return out;
      },
      recordLag: recordReplicationLag,
    });
    // Stopped before the server and DynamoDB go (stops run in reverse), so no pass reads a closed table.
    stops.push(() => replication.stop());

    const reconciling = reconcileInBackground(reconciler, startedAt, schedule, stepFunctions, stages);
    // Before the server closes (stops run in reverse): the pass is interrupted between two repairs
    // and awaited while everything it talks to still answers.
    stops.push(() => reconciling.stop());

    // Where a running stack's services are, so `ferry audit` in another terminal can reach them.
    writeStackFile(lock, { url: server.url, dynamodbEndpoint: dynamo.endpoint, s3Endpoint: process.env.FERRY_S3_ENDPOINT, tablePrefix: process.env.FERRY_TABLE_PREFIX });
    stops.push(async () => void removeOwnStackFile(lock));

    return { url: server.url, port: server.port, dataDir, cloudsYaml, reconciled: reconciling.reconciled, stop: stopAll };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

/**
 * The start's reconcile pass, in the background: the stack answers requests while it runs (issue
 * 16: it was 0.4-0.5 s of a 3 s restart). Then the previous process's executions resume, and the
 * timer's passes begin (so two passes never overlap).
 *
 * Why a request may be served before the pass ends: on AWS the reconciler runs on a schedule
 * concurrently with live traffic, so its correctness cannot depend on running before the first
 * request. Each repair acts only on what is older than `before` (here this start's time, which no
 * request of this process predates) and re-checks under the same conditions as the operations
 * (versioned writes, transactions), so a request that changes a resource first makes the repair's
 * write fail and the repair leaves it. What keeps its old order: the executions the previous
 * process left running resume only after the pass, as before, so the pass still sees them as
 * they were left (and still finds them listed as running, which is all an operation's check asks).
 *
 * A stop during the pass aborts it between two repairs (reconciler.ts `signal`): an interrupted
 * pass is like any pass that ended there; the executions then resume at the next start.
 */
function reconcileInBackground(
  reconciler: Reconcile,
  startedAt: Date,
  schedule: ReconcileSchedule,
  stepFunctions: LocalStepFunctions,
  stages: StartStages,
): { reconciled: Promise<ReconcileEvent>; stop(): Promise<void> } {
  const stopping = new AbortController();
  let timerPasses: ReconcileLoop | undefined;
  const reconciled = stages
    .run('reconcile', () => reconcileOnce(reconciler, 'start', startedAt, logReconcile, stopping.signal), reconcileNote)
    .then((event) => {
      if (!stopping.signal.aborted) {
        stepFunctions.resumeRunning();
        timerPasses = startReconcileLoop(reconciler, schedule);
      }
      return event;
    });
  return {
    reconciled,
    async stop() {
      stopping.abort();
      // Settled, whatever it was: a failure to resume is the caller's to report (main.ts), not the stop's.
      await Promise.allSettled([reconciled]);
      await timerPasses?.stop();
    },
  };
}

/** What the reconcile stage line says of its pass (the log line that follows it has the lists). */
function reconcileNote(event: ReconcileEvent): string {
  if ('interrupted' in event) return 'interrupted by the stop';
  if ('error' in event) return 'failed (logged); the next run tries again';
  const { repaired, left = [], remaining } = event.outcome;
  return `${repaired.length} repaired, ${left.length} left, ${remaining.length} finding(s) for an operator`;
}

/** A DynamoDB Local the caller launched: answering, with Ferry's tables (one stage each). */
async function dynamoAnswering(dynamo: DynamoProcess, stages: StartStages): Promise<LocalDynamo> {
  const client = await stages.run('DynamoDB Local', () => waitForDynamo(dynamo), () => classArchiveNote(dynamo.classArchive));
  try {
    await stages.run('tables', () => createTables(client), (created) => (created.length === 0 ? 'all there' : `${created.length} created`));
  } finally {
    client.destroy();
  }
  return { endpoint: dynamo.endpoint, port: dynamo.port, stop: () => dynamo.stop() };
}

/** What the DynamoDB Local line says of its class archive (dynamo-cds.ts). */
function classArchiveNote(archive: ClassArchiveState): string {
  if (archive.state === 'used') return 'class archive mapped';
  // A write that cannot finish is not announced as one in progress: the writer keeps an archive only
  // if its JVM ends well, and at a stop only within its deadline; how the last one ended is said.
  if (archive.state === 'writing') {
    const last = archive.lastTry ? `; the last writer ${archive.lastTry}` : '';
    return `no class archive yet: a JVM beside it writes one for the next start if it ends well (within ${WRITER_STOP_DEADLINE_S} s of a stop)${last}`;
  }
  return `no class archive: ${archive.reason}`;
}

/** DynamoDB Local started here (tests, benches): what a previous holder left running is stopped first. */
async function startOwnDynamo(dataDir: string): Promise<LocalDynamo> {
  const dbPath = join(dataDir, DYNAMO_SUBDIR);
  // A previous holder killed alone (not its process group) left its DynamoDB Local on these files.
  await stopOrphanedDynamo(dbPath);
  return startDynamo({ dataDir: dbPath });
}

async function startS3(dataDir: string): Promise<Running & { endpoint: string }> {
  const S3rver = require('s3rver') as new (o: Record<string, unknown>) => S3rverInstance;
  const s3rver = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory: join(dataDir, 's3'),
    configureBuckets: [{ name: LOCAL_BUCKET }],
  });
  const { port } = await s3rver.run();
  return {
    endpoint: `http://127.0.0.1:${port}`,
    stop: async () => {
      const closing = s3rver.close();
      s3rver.httpServer?.closeAllConnections();
      await closing;
    },
  };
}

/** What `starting` resolved to; undefined when it failed (that failure is thrown where it is awaited). */
async function settledValue<T>(starting: Promise<T>): Promise<T | undefined> {
  const [outcome] = await Promise.allSettled([starting]);
  return outcome.status === 'fulfilled' ? outcome.value : undefined;
}

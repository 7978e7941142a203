/**
 * The embedded local stack behind `npm start`: DynamoDB Local, s3rver, the local Step Functions
 * and the HTTP server, all with their data under one directory, so a stop and a start on the same
 * directory keep every table, object and execution.
 *
 * It points the process's functions at these services through the same environment variables the
 * functions read on AWS (FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT, FERRY_BUCKET,
 * FERRY_SFN_ENDPOINT), so the handlers run unchanged.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { setDb } from '../../functions/core/db.js';
import { setSfn } from '../../functions/core/executions.js';
import { setS3 } from '../../functions/core/s3.js';
import { getBackendRecord, listBackends } from '../../functions/volumes/backends.js';
import { FUNCTIONS, type FunctionWiring, type StateMachineWiring } from '../../functions/wiring.js';
import { startDynamo } from './dynamo.js';
import { STEP_FUNCTIONS_PATH, startHttpServer } from './http.js';
import { startReplicationLoop } from './replicator.js';
import { seedSandbox } from './sandbox.js';
import { ECS_RUN_TASK_SYNC, LocalStepFunctions, type TaskIntegration } from './stepfunctions.js';
import { copyTaskIntegration } from './copy-task.js';

const require = createRequire(import.meta.url);

export const LOCAL_BUCKET = 'ferry-local';
/** Written in the data dir while the stack runs: its URL and service endpoints. */
export const STACK_FILE = 'stack.json';

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
}

export interface LocalStack {
  url: string;
  port: number;
  dataDir: string;
  stop(): Promise<void>;
}

interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
  httpServer?: { closeAllConnections(): void };
}

export async function startLocalStack(options: LocalStackOptions): Promise<LocalStack> {
  const dataDir = resolve(options.dataDir);
  mkdirSync(dataDir, { recursive: true });
  const stops: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    for (const stop of stops.reverse()) await stop();
    stops.length = 0;
    // Clients cached for this stack point at ports that are gone now.
    setDb(undefined);
    setS3(undefined);
    setSfn(undefined);
  };

  try {
    const dynamo = await startDynamo({ dataDir: join(dataDir, 'dynamodb') });
    stops.push(() => dynamo.stop());

    const S3rver = require('s3rver') as new (o: Record<string, unknown>) => S3rverInstance;
    const s3rver = new S3rver({
      address: '127.0.0.1',
      port: 0,
      silent: true,
      directory: join(dataDir, 's3'),
      configureBuckets: [{ name: LOCAL_BUCKET }],
    });
    const s3Address = await s3rver.run();
    stops.push(async () => {
      const closing = s3rver.close();
      s3rver.httpServer?.closeAllConnections();
      await closing;
    });

    process.env.FERRY_DYNAMODB_ENDPOINT = dynamo.endpoint;
    process.env.FERRY_S3_ENDPOINT = `http://127.0.0.1:${s3Address.port}`;
    process.env.FERRY_BUCKET = LOCAL_BUCKET;
    process.env.FERRY_AUTH_MODE = 'noauth';
    process.env.FERRY_DATA_DIR = dataDir;
    setDb(undefined);
    setS3(undefined);
    setSfn(undefined);

    await seedSandbox(dataDir);

    const functions = options.functions ?? FUNCTIONS;
    const copyTasks = copyTaskIntegration({ logDir: join(dataDir, 'copy-tasks'), quiet: options.quiet });
    const stepFunctions = new LocalStepFunctions({
      dataDir,
      functions,
      ...(options.machines ? { machines: options.machines } : {}),
      integrations: { [ECS_RUN_TASK_SYNC]: copyTasks, ...options.integrations },
      quiet: options.quiet,
    });
    const server = await startHttpServer({ port: options.port ?? 0, functions, stepFunctions, quiet: options.quiet });
    // The server closes first, so no new request starts an execution while executions stop.
    stops.push(async () => {
      // stop() aborts every execution at once (they resume on the next start), then waits for work
      // in flight; the copy workers of those executions are stopped meanwhile, not waited for.
      const stopping = stepFunctions.stop();
      await copyTasks.stop();
      await stopping;
    });
    stops.push(() => server.close());
    process.env.FERRY_SFN_ENDPOINT = server.url + STEP_FUNCTIONS_PATH;
    setSfn(undefined);

    stepFunctions.resumeRunning();

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
    });
    // Stopped before the server and DynamoDB go (stops run in reverse), so no pass reads a closed table.
    stops.push(() => replication.stop());

    // Where a running stack's services are, so `ferry audit` in another terminal can reach them.
    const stackFile = join(dataDir, STACK_FILE);
    writeFileSync(stackFile, JSON.stringify({ url: server.url, dynamodbEndpoint: dynamo.endpoint, s3Endpoint: process.env.FERRY_S3_ENDPOINT, pid: process.pid }, null, 2));
    stops.push(async () => rmSync(stackFile, { force: true }));

    return { url: server.url, port: server.port, dataDir, stop: stopAll };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

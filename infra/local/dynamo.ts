/**
 * Amazon's DynamoDB Local, started as a child process (dynamo-process.ts: how, and why it dies
 * with its parent), with Ferry's tables created in it.
 *
 * With a data directory the database lives on disk and survives restarts (sharedDb, so every
 * credential sees the same tables); without one it is in memory (tests).
 */
import { CreateTableCommand, DynamoDBClient, ListTablesCommand, UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { ConfigurationError } from '../../functions/core/errors.js';
import { GSI1, TABLES, TTL_ATTRIBUTE, tableName } from '../../functions/core/tables.js';
import { launchDynamo, type DynamoProcess, type DynamoProcessOptions } from './dynamo-process.js';

export { launchDynamo, type DynamoProcess } from './dynamo-process.js';

export interface LocalDynamo {
  endpoint: string;
  port: number;
  stop(): Promise<void>;
}

/** How long a JVM may take to answer (a first start on a loaded 2-core machine has taken 45 s). */
const ANSWER_DEADLINE_MS = 60_000;
/** Between two ListTables while the JVM starts: short, since every 50 ms of lag is start time. */
const ANSWER_POLL_MS = 50;

/** Launches DynamoDB Local, waits until it answers and creates the missing tables. */
export async function startDynamo(options: DynamoProcessOptions = {}): Promise<LocalDynamo> {
  const dynamo = await launchDynamo(options);
  try {
    const client = await waitForDynamo(dynamo);
    try {
      await createTables(client);
    } finally {
      client.destroy();
    }
  } catch (e) {
    await dynamo.stop();
    throw e;
  }
  return { endpoint: dynamo.endpoint, port: dynamo.port, stop: () => dynamo.stop() };
}

/** Waits until a launched DynamoDB Local answers ListTables; returns a client on it (the caller destroys it). */
export async function waitForDynamo(dynamo: DynamoProcess, deadlineMs = ANSWER_DEADLINE_MS): Promise<DynamoDBClient> {
  const client = new DynamoDBClient({ endpoint: dynamo.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' }, maxAttempts: 1 });
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    if (dynamo.exited()) {
      client.destroy();
      const { code, signal, error } = await dynamo.exit;
      const how = error ? error.message : `exit ${code ?? signal}`;
      throw new ConfigurationError(`DynamoDB Local exited while starting (${how}; is Java 17 installed? \`java -version\`)`);
    }
    try {
      await client.send(new ListTablesCommand({}));
      return client;
    } catch (e) {
      // Refused or reset while the JVM starts: asked again until the deadline, which names the last error.
      if (Date.now() > deadline) {
        client.destroy();
        await dynamo.stop();
        throw new ConfigurationError(`DynamoDB Local did not answer on ${dynamo.endpoint} within ${deadlineMs / 1000} s (last: ${(e as Error).message})`, { cause: e });
      }
      await new Promise((r) => setTimeout(r, ANSWER_POLL_MS));
    }
  }
}

/**
 * Creates every table of functions/core/tables.ts that does not exist yet, all at once (DynamoDB
 * Local creates them ACTIVE; one after another cost a first start about a second). Returns the
 * names it created: none on a restart.
 */
export async function createTables(client: DynamoDBClient): Promise<string[]> {
  const existing = new Set((await client.send(new ListTablesCommand({}))).TableNames ?? []);
  const missing = TABLES.map((t) => tableName(t.key)).filter((name) => !existing.has(name));
  await Promise.all(missing.map((name) => createTable(client, name)));
  return missing;
}

async function createTable(client: DynamoDBClient, name: string): Promise<void> {
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
  // DynamoDB Local 3.3 records the setting (DescribeTimeToLive says ENABLED); nothing local depends on expiry.
  await client.send(new UpdateTimeToLiveCommand({ TableName: name, TimeToLiveSpecification: { AttributeName: TTL_ATTRIBUTE, Enabled: true } }));
}

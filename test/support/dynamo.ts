/**
 * DynamoDB Local for a test file that needs only tables: every table of functions/core/tables.ts
 * created, the process-wide client pointed at it. Use in beforeAll/afterAll:
 *   const ddb = await useLocalDynamo();  ...  await ddb.stop();
 *
 * In the integration tier the tables live in the tier's shared DynamoDB Local (started once by
 * test/support/shared-dynamo.ts) under the table-name prefix test/support/setup.ts gave this file
 * (FERRY_TABLE_PREFIX: set before the file is loaded, so a module-level `tableName()` sees it, and
 * inherited by child processes); `stop()` deletes them. Elsewhere, or
 * with `{ dedicated: true }` (a test of starting DynamoDB Local itself, or one that lists every
 * table), or with FERRY_TEST_DEDICATED_DYNAMO=1 (to rule the sharing out while debugging), the
 * file starts its own JVM, as before.
 */
import { DeleteTableCommand, DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { inject } from 'vitest';
import { createDocumentClient, setDb } from '../../functions/core/db.js';
import { TABLES, tableName } from '../../functions/core/tables.js';
import { createTables, startDynamo, type LocalDynamo } from '../../infra/local/dynamo.js';
import { eventually } from './poll.js';

export async function useLocalDynamo(options: { dedicated?: boolean } = {}): Promise<LocalDynamo> {
  const shared = sharedDynamoEndpoint(options);
  if (!shared) {
    const dynamo = await startDynamo();
    process.env.FERRY_DYNAMODB_ENDPOINT = dynamo.endpoint;
    setDb(createDocumentClient());
    return {
      ...dynamo,
      stop: async () => {
        setDb(undefined);
        await dynamo.stop();
      },
    };
  }

  process.env.FERRY_DYNAMODB_ENDPOINT = shared;
  const client = sharedDynamoClient(shared);
  await eventually(
    async (note) => {
      try {
        await client.send(new ListTablesCommand({ Limit: 1 }));
        return true;
      } catch (e) {
        note(`${(e as Error).name}: ${(e as Error).message}`); // not up yet: the failure message names the last error
        return undefined;
      }
    },
    `the shared DynamoDB Local at ${shared} to answer`,
    { timeoutMs: 110_000, intervalMs: 150 },
  );
  await createTables(client);
  setDb(createDocumentClient());
  return {
    endpoint: shared,
    port: Number(new URL(shared).port),
    stop: async () => {
      setDb(undefined);
      try {
        await dropFileTables(client);
      } finally {
        client.destroy();
      }
    },
  };
}

/** The tier's shared DynamoDB Local, when this run has one and the caller may use it (`dedicated` not asked). */
export function sharedDynamoEndpoint(options: { dedicated?: boolean } = {}): string | undefined {
  return options.dedicated || process.env.FERRY_TEST_DEDICATED_DYNAMO === '1' ? undefined : inject('sharedDynamoEndpoint');
}

export function sharedDynamoClient(endpoint: string): DynamoDBClient {
  return new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' }, maxAttempts: 1 });
}

/** Deletes this file's tables (those under its FERRY_TABLE_PREFIX) from the shared DynamoDB Local. */
export async function dropFileTables(client: DynamoDBClient): Promise<void> {
  await Promise.all(TABLES.map((t) => client.send(new DeleteTableCommand({ TableName: tableName(t.key) }))));
}

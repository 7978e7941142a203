/**
 * A DynamoDB Local for a test file: in memory, tables created, the process-wide client pointed at
 * it. Use in beforeAll/afterAll:
 *   const ddb = await useLocalDynamo();  ...  await ddb.stop();
 */
import { createDocumentClient, setDb } from '../../functions/core/db.js';
import { startDynamo, type LocalDynamo } from '../../infra/local/dynamo.js';

export async function useLocalDynamo(): Promise<LocalDynamo> {
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

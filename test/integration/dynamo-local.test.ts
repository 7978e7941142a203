import { afterAll, beforeAll, expect, test } from 'vitest';
import { ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { db } from '../../functions/core/db.js';
import { TABLES, tableName } from '../../functions/core/tables.js';
import { useLocalDynamo } from '../support/dynamo.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';

let ddb: LocalDynamo;
beforeAll(async () => {
  ddb = await useLocalDynamo({ dedicated: true }); // its own JVM: this tests starting one, and lists every table
});
afterAll(async () => ddb.stop());

test('DynamoDB Local starts with every table of the table list', async () => {
  const out = await db().send(new ListTablesCommand({}));
  expect(out.TableNames?.sort()).toEqual(TABLES.map((t) => tableName(t.key)).sort());
});

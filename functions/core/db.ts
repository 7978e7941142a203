/**
 * The DynamoDB client every function uses. Created once per process from the environment
 * (FERRY_DYNAMODB_ENDPOINT points it at DynamoDB Local); tests and benchmarks may pass their own.
 *
 * A middleware counts every request sent, so benchmarks can report DynamoDB requests per API call
 * without guessing.
 */
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { DependencyError } from './errors.js';
import { BatchGetCommand, DynamoDBDocumentClient, QueryCommand, ScanCommand, type QueryCommandInput, type ScanCommandInput } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';

let documentClient: DynamoDBDocumentClient | undefined;
let requestCount = 0;
const requestsByCommand = new Map<string, number>();

/**
 * How long a request may take before the SDK gives up on it (and retries, within maxAttempts).
 * Without a bound a DynamoDB that accepts the connection and never answers (a stopped JVM, a
 * black-holed route) hangs every caller for good: `ferry audit` never returned. One request is
 * bounded by DynamoDB itself (1 MB per page, 100 items per transaction) and answers in
 * milliseconds; 20 s is far beyond that even for DynamoDB Local on a loaded two-core machine.
 */
export const DYNAMO_REQUEST_TIMEOUT_MS = 20_000;
export const DYNAMO_CONNECTION_TIMEOUT_MS = 5_000;

export function dynamoConfigFromEnv(): DynamoDBClientConfig {
  const endpoint = process.env.FERRY_DYNAMODB_ENDPOINT;
  const config: DynamoDBClientConfig = {
    region: process.env.AWS_REGION ?? 'us-east-1',
    maxAttempts: 5,
    // throwOnRequestTimeout: without it @smithy/node-http-handler 4.x only logs a warning when
    // requestTimeout passes and goes on waiting (test/integration/dynamo-timeout.test.ts).
    requestHandler: { requestTimeout: DYNAMO_REQUEST_TIMEOUT_MS, throwOnRequestTimeout: true, connectionTimeout: DYNAMO_CONNECTION_TIMEOUT_MS },
  };
  if (endpoint) {
    config.endpoint = endpoint;
    // DynamoDB Local accepts any credentials; fixed ones keep its data file name stable.
    config.credentials = { accessKeyId: 'ferry', secretAccessKey: 'ferry' };
  }
  return config;
}

export function createDocumentClient(config: DynamoDBClientConfig = dynamoConfigFromEnv()): DynamoDBDocumentClient {
  const client = DynamoDBDocumentClient.from(new DynamoDBClient(config), {
    marshallOptions: { removeUndefinedValues: true, convertClassInstanceToMap: false },
  });
  // The SDK's logger middleware builds a redacted copy of every request's input and output (a walk
  // of the operation's schema, on a DynamoDB item attribute by attribute) and hands it to the
  // client's logger, which by default is a no-op that throws it away: about 2% of the node process's
  // CPU in bench:attachments' 32-client API rounds. Without a logger of our own it is removed; with one it stays.
  if (config.logger === undefined) client.middlewareStack.remove(SDK_LOGGER_MIDDLEWARE);
  client.middlewareStack.add(
    (next, context) => async (args) => {
      requestCount++;
      const name = context.commandName ?? 'unknown';
      requestsByCommand.set(name, (requestsByCommand.get(name) ?? 0) + 1);
      return next(args);
    },
    { step: 'initialize', name: 'ferryRequestCounter' },
  );
  return client;
}

/** The name the SDK's logger middleware is added under (@aws-sdk/middleware-logger, in @aws-sdk/core). */
export const SDK_LOGGER_MIDDLEWARE = 'loggerMiddleware';

/** The process-wide client. */
export function db(): DynamoDBDocumentClient {
  documentClient ??= createDocumentClient();
  return documentClient;
}

/** Replace the process-wide client (tests, local stack restarts). */
export function setDb(client: DynamoDBDocumentClient | undefined): void {
  documentClient = client;
}

export function dynamoRequests(): { total: number; byCommand: Record<string, number> } {
  return { total: requestCount, byCommand: Object.fromEntries(requestsByCommand) };
}

export function resetDynamoRequests(): void {
  requestCount = 0;
  requestsByCommand.clear();
}

/** The code of each item of a cancelled transaction, in order ([] for any other error). */
export function cancellationCodes(e: unknown): (string | undefined)[] {
  return ((e as { CancellationReasons?: { Code?: string }[] }).CancellationReasons ?? []).map((r) => r.Code);
}

/** A cancelled transaction's item `index`, as it was when its condition failed (ALL_OLD), or undefined. */
export function failedItem(e: unknown, index: number): Record<string, unknown> | undefined {
  const reason = (e as { CancellationReasons?: { Code?: string; Item?: Record<string, unknown> }[] }).CancellationReasons?.[index];
  if (reason?.Code !== 'ConditionalCheckFailed' || !reason.Item) return undefined;
  // Errors are not translated by the document client: the old item comes in the wire format.
  return unmarshall(reason.Item as Parameters<typeof unmarshall>[0]);
}

/** True when a DynamoDB error means a condition did not hold (plain or inside a transaction). */
export function isConditionFailure(e: unknown): boolean {
  const name = (e as { name?: string })?.name;
  if (name === 'ConditionalCheckFailedException') return true;
  if (name === 'TransactionCanceledException') {
    const reasons = (e as { CancellationReasons?: { Code?: string }[] }).CancellationReasons ?? [];
    return reasons.some((r) => r.Code === 'ConditionalCheckFailed');
  }
  return false;
}

/** True when a transaction lost to a concurrent transaction on the same item (safe to retry). */
export function isTransactionConflict(e: unknown): boolean {
  const name = (e as { name?: string })?.name;
  if (name === 'TransactionConflictException') return true;
  if (name === 'TransactionCanceledException') {
    const reasons = (e as { CancellationReasons?: { Code?: string }[] }).CancellationReasons ?? [];
    return reasons.some((r) => r.Code === 'TransactionConflict');
  }
  return false;
}

/**
 * Runs `attempt` again while it loses races (condition failures the caller marks as retryable,
 * or transaction conflicts), with jittered backoff. The attempt re-reads and re-applies its pure
 * transition each time, so a retry never writes stale state.
 */
export async function withRetries<T>(attempt: (n: number) => Promise<T>, options: { attempts?: number; retryable?: (e: unknown) => boolean } = {}): Promise<T> {
  const attempts = options.attempts ?? 50;
  const retryable = options.retryable ?? isTransactionConflict;
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (e) {
      if (n + 1 >= attempts || !retryable(e)) throw e;
      const ceiling = Math.min(200, 5 * 2 ** Math.min(n, 6));
      await new Promise((r) => setTimeout(r, Math.random() * ceiling));
    }
  }
}

/** Every item a Query returns, following LastEvaluatedKey. */
export async function queryAll(input: QueryCommandInput): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let ExclusiveStartKey: Record<string, unknown> | undefined;
  do {
    const page = await db().send(new QueryCommand({ ...input, ExclusiveStartKey }));
    items.push(...((page.Items ?? []) as Record<string, unknown>[]));
    ExclusiveStartKey = page.LastEvaluatedKey;
  } while (ExclusiveStartKey);
  return items;
}

/**
 * Consistent reads of any number of keys of one table, 100 per BatchGetItem, unprocessed keys sent
 * again with backoff; keys with no item are left out (order not kept).
 */
export async function batchGetAll(table: string, keys: Record<string, unknown>[]): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  for (let i = 0; i < keys.length; i += 100) {
    let pending = keys.slice(i, i + 100);
    for (let attempt = 0; pending.length > 0; attempt++) {
      const page = await db().send(new BatchGetCommand({ RequestItems: { [table]: { Keys: pending, ConsistentRead: true } } }));
      out.push(...((page.Responses?.[table] ?? []) as Record<string, unknown>[]));
      pending = (page.UnprocessedKeys?.[table]?.Keys ?? []) as Record<string, unknown>[];
      if (pending.length && attempt > 10) throw new DependencyError(`BatchGetItem left ${pending.length} keys of ${table} unprocessed`);
      if (pending.length) await new Promise((r) => setTimeout(r, 20 * 2 ** Math.min(attempt, 5)));
    }
  }
  return out;
}

/** Every item a Scan returns, following LastEvaluatedKey. */
export async function scanAll(input: ScanCommandInput): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let ExclusiveStartKey: Record<string, unknown> | undefined;
  do {
    const page = await db().send(new ScanCommand({ ...input, ExclusiveStartKey }));
    items.push(...((page.Items ?? []) as Record<string, unknown>[]));
    ExclusiveStartKey = page.LastEvaluatedKey;
  } while (ExclusiveStartKey);
  return items;
}

/**
 * The items of one kind (`sk`, `pk` prefix) in a table: a project's through GSI1 when `gsi1pk` is
 * given, else all of them (admin `all_tenants`: a scan).
 */
export async function listKind(table: string, kind: { sk: string; pkPrefix: string; gsi1pk?: string }): Promise<Record<string, unknown>[]> {
  return kind.gsi1pk !== undefined
    ? queryAll({ TableName: table, IndexName: 'gsi1', KeyConditionExpression: 'gsi1pk = :p', ExpressionAttributeValues: { ':p': kind.gsi1pk } })
    : scanAll({ TableName: table, FilterExpression: 'sk = :sk AND begins_with(pk, :prefix)', ExpressionAttributeValues: { ':sk': kind.sk, ':prefix': kind.pkPrefix } });
}

/** A further condition a versioned update must also meet (e.g. "no attachment in flight"). */
export interface ExtraCondition {
  expression: string;
  names?: Record<string, string>;
  values?: Record<string, unknown>;
}

/** An Update for a transaction or alone: what TransactWriteItems and UpdateCommand both take. */
export interface VersionedUpdate {
  TableName: string;
  Key: Record<string, unknown>;
  UpdateExpression: string;
  ConditionExpression: string;
  ExpressionAttributeNames: Record<string, string>;
  ExpressionAttributeValues: Record<string, unknown>;
}

/**
 * The Update that turns the item `before` into `after`: SET for each changed top-level attribute,
 * REMOVE for each that became undefined, `version` bumped, conditioned on the version read (and
 * on `extra`). Attributes that did not change are not touched, so writers of other attributes of
 * the same item (the attachments API on a volume) never lose their writes.
 */
export function versionedUpdate<T extends { id: string; version: number }>(
  target: { TableName: string; Key: Record<string, unknown> },
  before: T,
  after: T,
  extra?: ExtraCondition,
): VersionedUpdate {
  const names: Record<string, string> = { '#version': 'version', ...(extra?.names ?? {}) };
  const values: Record<string, unknown> = { ':expected': before.version, ':next': before.version + 1, ...(extra?.values ?? {}) };
  const sets: string[] = ['#version = :next'];
  const removes: string[] = [];
  let i = 0;
  for (const k of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (k === 'version' || k === 'id') continue;
    const a = (before as Record<string, unknown>)[k];
    const b = (after as Record<string, unknown>)[k];
    if (JSON.stringify(a) === JSON.stringify(b)) continue;
    names[`#a${i}`] = k;
    if (b === undefined) removes.push(`#a${i}`);
    else {
      values[`:a${i}`] = b;
      sets.push(`#a${i} = :a${i}`);
    }
    i++;
  }
  return {
    ...target,
    UpdateExpression: `SET ${sets.join(', ')}${removes.length ? ` REMOVE ${removes.join(', ')}` : ''}`,
    ConditionExpression: `#version = :expected${extra ? ` AND (${extra.expression})` : ''}`,
    ExpressionAttributeNames: names,
    ExpressionAttributeValues: values,
  };
}

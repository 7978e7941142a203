/**
 * The API's own DynamoDB requests, replayed straight to DynamoDB Local by bare loops: what the
 * attachment cycle's request shape allows at most, whatever Ferry's code around it costs.
 *
 * bench:attachments compares the API with a ceiling of one two-item transaction and two reads per
 * call. At 32 clients DynamoDB Local applies writes nearly one at a time (docs/attachments-bench.md),
 * so the ratio is set first by what the cycle writes. This module records the requests of one real
 * API cycle (create, update, complete, delete: the DocumentClient inputs, in order) and sends the
 * same requests again from `clients` loops, each on its own copy of the volume item and its own
 * attachment, instance and host ids, with the volume's version conditions moved on by the versions
 * a cycle takes. Every request keeps its condition, so a replay that drifted from what the API did
 * fails at once rather than measure something else.
 *
 * The requests are replayed exactly as the API sent them. Since an attachment's state lives in
 * its volume item (docs/attachments-in-volume.md), that is the `in-volume` shape replayed before
 * the change, as measured then: the intent, the connect and the complete one UpdateItem of the
 * volume each, two transactions (the create and the delete, each changing the attachment item
 * and its volume together), the fence after the terminate. (The `minimum` shape before it, the
 * update's intent written alone, became the API's own when connect intents moved to the volume.)
 * The API over its replay is then Ferry's own cost (HTTP, handlers, SDK, drivers); the replay over
 * the ceiling is what the cycle's writes cost against the ceiling's.
 */
import { GetCommand, PutCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { db } from '../../functions/core/db.js';
import { tableName } from '../../functions/core/tables.js';

/** One request as the DocumentClient received it. */
export interface RecordedRequest {
  command: 'TransactWriteItemsCommand' | 'UpdateItemCommand' | 'PutItemCommand' | 'GetItemCommand';
  input: Record<string, any>;
}

/** One API cycle's requests and what they were made on. */
export interface RecordedCycle {
  requests: RecordedRequest[];
  /** The volume item before the cycle (the replay's copies start from it). */
  volumeItem: Record<string, any>;
  /** The volume's version after the cycle minus before it. */
  versionStep: number;
  /** The ids of the recorded cycle, replaced in each copy. */
  ids: { volume: string; attachment: string; instance: string; host: string };
}

const SENDABLE = new Set(['TransactWriteItemsCommand', 'UpdateItemCommand', 'PutItemCommand', 'GetItemCommand']);
const MIDDLEWARE = 'benchRecordRequests';

/**
 * Runs `cycle` (one API cycle on `ids.volume`, creating `ids.attachment`) and records every request
 * the DocumentClient sends meanwhile. `cycle` returns the attachment id it created.
 */
export async function recordCycle(ids: Omit<RecordedCycle['ids'], 'attachment'>, cycle: () => Promise<string>): Promise<RecordedCycle> {
  const volumeItem = await readVolume(ids.volume);
  const requests: RecordedRequest[] = [];
  db().middlewareStack.add(
    (next, context) => async (args) => {
      const command = context.commandName ?? '';
      if (!SENDABLE.has(command)) throw new Error(`bench replay: the cycle sent a ${command}, which the replay cannot send`);
      requests.push({ command: command as RecordedRequest['command'], input: structuredClone(args.input as Record<string, any>) });
      return next(args);
    },
    { step: 'initialize', name: MIDDLEWARE },
  );
  let attachment: string;
  try {
    attachment = await cycle();
  } finally {
    db().middlewareStack.remove(MIDDLEWARE);
  }
  const after = await readVolume(ids.volume);
  return { requests, volumeItem, versionStep: Number(after.version) - Number(volumeItem.version), ids: { ...ids, attachment } };
}

/**
 * `value` with the recorded cycle's ids replaced by copy `copy`'s (cycle `n` of it: its own
 * attachment) and the volume's version conditions (`:version`, `:next`) moved on by `n` cycles.
 * Every id keeps its length, so item sizes stay the recorded ones.
 */
export function forCopy<T>(value: T, cycle: RecordedCycle, versionStep: number, copy: number, n: number): T {
  const { volume, attachment, instance, host } = cycle.ids;
  const text = JSON.stringify(value)
    .split(attachment)
    .join(withSuffix(attachment, `${pad(copy, 6)}${pad(n, 6)}`))
    .split(volume)
    .join(withSuffix(volume, pad(copy, 12)))
    .split(instance)
    .join(withSuffix(instance, pad(copy, 12)))
    .split(host)
    .join(withSuffix(host, pad(copy, 6)));
  return JSON.parse(text, (key, v) => ((key === ':version' || key === ':next') && typeof v === 'number' ? v + versionStep * n : v)) as T;
}

/**
 * `cycles` cycles of the recorded requests by each of `clients` loops at once, each on its own copy of the volume
 * (copies `firstCopy` on, made before the clock starts): API calls a second, 4 calls a cycle.
 */
export async function replay(cycle: RecordedCycle, clients: number, cycles: number, firstCopy: number): Promise<number> {
  const { requests, versionStep, volumeItem } = cycle;
  const copies = Array.from({ length: clients }, (_, c) => firstCopy + c);
  await Promise.all(copies.map((copy) => db().send(new PutCommand({ TableName: tableName('volume'), Item: forCopy(volumeItem, cycle, versionStep, copy, 0) }))));
  const t0 = performance.now();
  await Promise.all(copies.map(async (copy) => {
    for (let n = 0; n < cycles; n++) for (const r of requests) await send(r.command, forCopy(r.input, cycle, versionStep, copy, n));
  }));
  const seconds = (performance.now() - t0) / 1000;
  // The copies moved as the API's volume did: every cycle's versioned writes landed.
  const expected = Number(cycle.volumeItem.version) + versionStep * cycles;
  for (const copy of copies) {
    const version = Number((await readVolume(forCopy(cycle.ids.volume, cycle, versionStep, copy, 0))).version);
    if (version !== expected) throw new Error(`bench replay: copy ${copy} is at version ${version}, expected ${expected}`);
  }
  return (clients * cycles * 4) / seconds;
}

/** One recorded request sent again, through the DocumentClient. */
export function send(command: RecordedRequest['command'], input: Record<string, any>): Promise<unknown> {
  switch (command) {
    case 'TransactWriteItemsCommand':
      return db().send(new TransactWriteCommand(input as any));
    case 'UpdateItemCommand':
      return db().send(new UpdateCommand(input as any));
    case 'PutItemCommand':
      return db().send(new PutCommand(input as any));
    case 'GetItemCommand':
      return db().send(new GetCommand(input as any));
  }
}

async function readVolume(volumeId: string): Promise<Record<string, any>> {
  const item = (await db().send(new GetCommand({ TableName: tableName('volume'), Key: { pk: `VOL#${volumeId}`, sk: 'VOL' }, ConsistentRead: true }))).Item;
  if (!item) throw new Error(`bench replay: volume ${volumeId} not found`);
  return item;
}

const pad = (n: number, width: number) => String(n).padStart(width, '0');
/** `id` with its last characters replaced by `suffix` (same length). */
const withSuffix = (id: string, suffix: string) => id.slice(0, id.length - suffix.length) + suffix;

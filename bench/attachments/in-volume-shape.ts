/**
 * The `in-volume` replay shape: the recorded cycle's requests as they would be if an attachment's
 * mutable state lived in its volume item's summary (`attachments.<id>`) and its connect intents in
 * the volume item's own map (`connectIntents.<intent id>`: an intent write leaves the version
 * alone, and a versioned write sets a summary whole, so an intent kept inside the summary would be
 * lost to a concurrent connect), the attachment item staying the record by id (its GSI keys, its
 * tombstone). The plan for that change is in docs/attachments-in-volume.md.
 *
 * Today the connect and the complete write the attachment item and its volume item together (a
 * transaction), and DynamoDB Local costs a transaction about twice a single-item write
 * (docs/attachments-bench.md); the update's intent is already ONE UpdateItem on the volume item
 * (its `connectIntents`), which the connect's transaction ends. In this shape the connect and the
 * complete are each ONE UpdateItem on the volume item too, under the same version condition the
 * transaction had; the create and the delete stay transactions (they create and tombstone the attachment
 * item), the fence stays as it is. Every write the house rules ask for is still made, in the
 * same order: the intent before the connection, the fence after the terminate.
 *
 * The shape overstates rather than understates the cost: the attachment item is created with all
 * its fields, and the connect's summary carries everything the attachment item's update carried.
 */
import type { RecordedCycle, RecordedRequest } from './replay.js';

type Item = Record<string, any>;

/** The volume item's map of connect intents, by intent id, in this shape. */
const CONNECT_INTENTS = 'connectIntents';

/** An operation on an attachment item (a Put names its key in its Item). */
const isAttachment = (op: Item | undefined) => String(op?.Key?.pk ?? op?.Item?.pk).startsWith('ATT#');
const isVolume = (op: Item | undefined) => typeof op?.Key?.pk === 'string' && op.Key.pk.startsWith('VOL#');

/** The summary `attachments.<attachmentId> = :value` a volume update sets: its value's name, if any. */
function summaryValueName(update: Item, attachmentId: string): string | undefined {
  const names: Record<string, string> = update.ExpressionAttributeNames ?? {};
  const resolve = (token: string) => (token.startsWith('#') ? names[token] : token);
  for (const m of String(update.UpdateExpression).matchAll(/([#\w]+)\.(#\w+) = (:\w+)/g)) {
    if (resolve(m[1]!) === 'attachments' && resolve(m[2]!) === attachmentId) return m[3];
  }
  return undefined;
}

/** The attributes an attachment update SETs to plain values (`#n = :v` or `name = :v`), resolved. */
function setValues(update: Item): Item {
  const names: Record<string, string> = update.ExpressionAttributeNames ?? {};
  const values: Item = update.ExpressionAttributeValues ?? {};
  const set = String(update.UpdateExpression).split(/\b(?:ADD|REMOVE|DELETE)\b/)[0]!;
  const out: Item = {};
  for (const m of set.matchAll(/([#\w]+) = (:\w+)/g)) out[m[1]!.startsWith('#') ? names[m[1]!]! : m[1]!] = values[m[2]!];
  return out;
}

/** The API's own connect intent: one UpdateItem of the volume SETting its map of connect intents (kept as recorded). */
function isVolumeIntent(request: RecordedRequest): boolean {
  if (request.command !== 'UpdateItemCommand' || !isVolume(request.input)) return false;
  const names: Record<string, string> = request.input.ExpressionAttributeNames ?? {};
  return Object.values(names).includes(CONNECT_INTENTS) && /^SET /.test(String(request.input.UpdateExpression));
}

/** One recorded request in the `in-volume` shape (see the module's comment). */
function inVolume(request: RecordedRequest, attachmentId: string): RecordedRequest {
  const items = request.input.TransactItems as Item[] | undefined;
  if (!items || items.length !== 2) return request;
  const [first, second] = items as [Item, Item];
  if (!isVolume(second.Update)) return request;
  const summary = summaryValueName(second.Update, attachmentId);
  if (!summary) return request;
  const volume = structuredClone(second.Update);
  // The create stays as recorded: it makes the attachment item and lists it in the volume.
  if (!isAttachment(first.Update)) return request;
  // The connect and the complete: what the attachment's update set, in the summary; the volume's
  // update alone (the connect's already ends its intent, as recorded).
  volume.ExpressionAttributeValues[summary] = { ...volume.ExpressionAttributeValues[summary], ...setValues(first.Update) };
  return { command: 'UpdateItemCommand', input: volume };
}

/** The volume item a replay of this shape starts from: the recorded one, with its (empty) map of connect intents. */
export function inVolumeItem(cycle: RecordedCycle): Item {
  return { ...cycle.volumeItem, [CONNECT_INTENTS]: {} };
}

/** The cycle's requests in the `in-volume` shape; the volume versions a cycle takes do not change. */
export function inVolumeShape(cycle: RecordedCycle): RecordedRequest[] {
  const requests = cycle.requests.map((r) => inVolume(r, cycle.ids.attachment));
  const singles = requests.filter((r, i) => (r !== cycle.requests[i] && r.command === 'UpdateItemCommand') || isVolumeIntent(r)).length;
  // The intent, the connect and the complete: a cycle where any of them was not found is not the bench's cycle.
  if (singles !== 3) throw new Error(`bench replay: in-volume found ${singles} of the 3 writes it folds into the volume item (intent, connect, complete)`);
  return requests;
}

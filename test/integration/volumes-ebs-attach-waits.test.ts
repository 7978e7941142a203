/**
 * Attach waits (functions/attachments/attach-wait.ts) in the volume's `attachWaits` and on
 * attachment items written before that map, on an EBS backend, EC2 mocked (test/support/ebs-stack.ts):
 * - a volume holding a live wait is not deleted (its attachment is listed: the delete's own guard);
 * - the local stack keeps its data, so an attachment item may still hold its own `attachWait`,
 *   named from the attachment's version. Until none remain it is honoured as before: the audit
 *   reports it, the reconciler starts it under its own name, and the machine's steps record the
 *   outcome on the item.
 */
import { StartExecutionCommand, type SFNClient } from '@aws-sdk/client-sfn';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { describe, expect, test } from 'vitest';
import { ATTACH_WAIT_MACHINE } from '../../functions/attachments/attach-wait.js';
import { attachmentKey } from '../../functions/attachments/model.js';
import { getAttachmentRecord, getVolumeRecord } from '../../functions/attachments/repo.js';
import { runAudit } from '../../functions/audit/audit.js';
import { reconcile } from '../../functions/audit/reconciler.js';
import { db } from '../../functions/core/db.js';
import { setSfn, sfn } from '../../functions/core/executions.js';
import { tableName } from '../../functions/core/tables.js';
import { volumeKey } from '../../functions/volumes/model.js';
import { awsError } from '../support/fake-ec2.js';
import { useOneEbsBackend } from '../support/ebs-stack.js';
import { eventually } from '../support/poll.js';

const INSTANCES = ['i-0olditem1', 'i-0olditem2', 'i-0voldelete'];
const ebs = useOneEbsBackend(INSTANCES);

/** A new EBS volume, available: its id. */
async function availableVolume(): Promise<string> {
  const created = await ebs().api('POST', '/volumes', { volume: { size: 1, volume_type: 'ebs', availability_zone: 'eu-west-1a' } });
  const volumeId = created.body.volume.id as string;
  await eventually(async () => (await ebs().api('GET', `/volumes/${volumeId}`)).body.volume.status === 'available' || undefined, `volume ${volumeId} available`);
  return volumeId;
}
const reserved = async (volumeId: string) => (await ebs().api('POST', '/attachments', { attachment: { volume_uuid: volumeId, instance_uuid: '66666666-6666-4666-8666-666666666666' } })).body.attachment.id as string;

/**
 * An attachment of a new EBS volume connected to `host` whose wait is on its item, as written
 * before the volume's map: connected with the wait's start refused (no execution), then the wait
 * moved from the volume to the item under the item's naming. Its id, volume and the item's wait.
 */
async function waitOnItem(host: string) {
  const volumeId = await availableVolume();
  const attId = await reserved(volumeId);
  const real = await sfn();
  setSfn({ send: (command: unknown) => (command instanceof StartExecutionCommand ? Promise.reject(awsError('ServiceUnavailable', 'Step Functions is unavailable.')) : real.send(command as never)) } as unknown as SFNClient);
  expect((await ebs().api('PUT', `/attachments/${attId}`, { attachment: { connector: { host } } })).status).toBe(200);
  setSfn(real);
  const onVolume = (await getVolumeRecord(volumeId))!.volume.attachWaits![attId]!;
  const item = (await getAttachmentRecord(attId))!;
  const wait = { ...onVolume, execution: `${ATTACH_WAIT_MACHINE}-${attId}-${item.version}` };
  const table = tableName('volume');
  // As that Ferry wrote them: the summary without the full state (no updatedAt), the connect's fields on the item.
  const summary = (await getVolumeRecord(volumeId))!.volume.attachments[attId]!;
  await db().send(new UpdateCommand({ TableName: table, Key: volumeKey(volumeId), UpdateExpression: 'REMOVE attachWaits.#aid, attachments.#aid.updatedAt ADD version :one', ExpressionAttributeNames: { '#aid': attId }, ExpressionAttributeValues: { ':one': 1 } }));
  await db().send(
    new UpdateCommand({
      TableName: table,
      Key: attachmentKey(attId),
      UpdateExpression: 'SET attachWait = :w, attachStatus = :s, attachedHost = :h, connector = :c, connectionInfo = :i, attachTime = :t, mountpoint = :m, attachMode = :mode',
      ExpressionAttributeValues: { ':w': wait, ':s': summary.status, ':h': summary.host, ':c': summary.connector, ':i': summary.connectionInfo, ':t': summary.attachedAt, ':m': summary.mountpoint, ':mode': summary.mode },
    }),
  );
  return { attId, volumeId, wait };
}

/** The reconciler's records about `attId`, every record taken as past its grace. */
const reconcileNow = async (attId: string) => {
  const pass = await reconcile({ before: new Date(Date.now() + 1000) });
  return [...pass.repaired, ...pass.left].filter((r) => r.resource === `attachment ${attId}`);
};
const itemWaitEnded = (attId: string) =>
  eventually(async (note) => {
    const wait = (await getAttachmentRecord(attId))?.attachWait;
    return note(wait?.status) !== 'waiting' && !wait?.detachPending ? wait : undefined;
  }, `the item's wait of ${attId} to end`);

describe("a wait on an attachment item written before the volume's attachWaits", () => {
  test('is reported stuck by the audit, started by the reconciler under its own name, and recorded attached on the item', async () => {
    ebs().fake.attachEnds.set(INSTANCES[0]!, { looks: 1, then: 'attached' });
    const { attId, volumeId, wait } = await waitOnItem(INSTANCES[0]!);
    const findings = (await runAudit({ now: new Date(Date.parse(wait.startedAt) + 86_400_000) })).findings.filter((f) => f.resource === `attachment ${attId}`);
    expect(findings.map((f) => [f.kind, f.detail])).toContainEqual(['stuck-attach-wait', expect.stringContaining(`(execution ${wait.execution})`)]);
    // Act
    const records = await reconcileNow(attId);
    // Assess
    expect(records.map((r) => [r.kind, r.did])).toEqual([['stuck-attach-wait', `started ${wait.execution}, which no start had made`]]);
    expect(await itemWaitEnded(attId)).toMatchObject({ execution: wait.execution, status: 'attached' });
    expect((await getVolumeRecord(volumeId))!.volume.attachWaits).toEqual({});
    expect(await reconcileNow(attId)).toEqual([]);
    expect((await ebs().api('DELETE', `/attachments/${attId}`)).status).toBe(200);
    expect((await runAudit()).findings).toEqual([]);
  });

  test('an attach EC2 drops: the Failed step records it on the item, error_attaching, and detaches what EC2 held', async () => {
    ebs().fake.attachEnds.set(INSTANCES[1]!, { looks: 1, then: 'vanish' });
    const { attId, volumeId } = await waitOnItem(INSTANCES[1]!);
    // Act
    await reconcileNow(attId);
    // Assess
    expect(await itemWaitEnded(attId)).toMatchObject({ status: 'failed', reason: expect.stringContaining('EC2 holds no attachment of EBS volume') });
    expect((await getAttachmentRecord(attId))!.attachStatus).toBe('error_attaching');
    expect((await getVolumeRecord(volumeId))!.volume).toMatchObject({ status: 'available', attachWaits: {}, connections: {} });
    expect((await ebs().api('DELETE', `/attachments/${attId}`)).status).toBe(200);
    expect((await runAudit()).findings).toEqual([]);
  });
});

test('a volume holding a live wait is not deleted: its attachment is listed, which the delete refuses (the wait and its volume stay)', async () => {
  ebs().fake.attachEnds.set(INSTANCES[2]!, { looks: 0, then: 'stuck' });
  const volumeId = await availableVolume();
  const attId = await reserved(volumeId);
  expect((await ebs().api('PUT', `/attachments/${attId}`, { attachment: { connector: { host: INSTANCES[2] } } })).status).toBe(200);
  const wait = (await getVolumeRecord(volumeId))!.volume.attachWaits![attId]!;
  // Act
  const refused = await ebs().api('DELETE', `/volumes/${volumeId}`);
  // Assess
  expect([refused.status, wait.status]).toEqual([400, 'waiting']);
  expect((await getVolumeRecord(volumeId))!.volume).toMatchObject({ status: 'attaching', attachWaits: { [attId]: wait } });
  expect((await ebs().api('DELETE', `/attachments/${attId}`)).status).toBe(200);
  expect((await getVolumeRecord(volumeId))!.volume.attachWaits).toEqual({});
});

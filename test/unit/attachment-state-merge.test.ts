/**
 * The volume's summary of an attachment carries its whole mutable state (transitions.ts summaryOf),
 * and attachmentOf (model.ts) reads it back over an item that was not written since: a reader
 * sees what the last transition made, whichever record was written last.
 */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { failAttach } from '../../functions/attachments/attach-wait.js';
import { attachmentOfSummary } from '../../functions/attachments/listed-removal.js';
import { attachmentOf, type Attachment } from '../../functions/attachments/model.js';
import { complete, connect, legacyAttach, remove, reserve } from '../../functions/attachments/transitions.js';
import type { Volume } from '../../functions/volumes/model.js';
import { connectorFor, INSTANCE_A, localConnection, T0, T1, volumeFixture } from '../support/attachment-fixtures.js';

const T2 = '2026-01-02T03:04:07.000Z';
const T3 = '2026-01-02T03:04:08.000Z';
/** The fields attachmentOf takes from a full-state summary; `version` stays the item's. */
const withoutVersion = ({ version: _v, ...rest }: Attachment) => rest;

function reserved(): { volume: Volume; attachment: Attachment } {
  return reserve(volumeFixture(), { attachmentId: 'att-1', instanceUuid: INSTANCE_A, now: T0 });
}

describe('summaryOf: the full mutable state', () => {
  test('a connected summary holds the connection info, the connector and when it changed', () => {
    const r = reserved();
    const c = connect(r.volume, r.attachment, { connector: connectorFor('h1'), connection: localConnection('h1'), now: T1 }, { checkDuplicates: true });
    const summary = c.volume.attachments['att-1']!;
    expect(summary.connectionInfo).toEqual(c.attachment.connectionInfo);
    expect(summary.connectionInfo).not.toBeNull();
    expect(summary.connector).toEqual(c.attachment.connector);
    expect(summary.updatedAt).toBe(T1);
    expect(r.volume.attachments['att-1']).toMatchObject({ connectionInfo: null, updatedAt: T0 });
  });

  test('a failed attach keeps the connector, drops the connection info and is dated', () => {
    const r = reserved();
    const c = connect(r.volume, r.attachment, { connector: connectorFor('h1'), connection: localConnection('h1'), now: T1 }, { checkDuplicates: true });
    const volume = { ...c.volume, attachWaits: { 'att-1': { execution: 'x', host: 'h1', status: 'waiting' as const, startedAt: T1 } } };
    const failed = failAttach(volume, c.attachment, 'gone', T2);
    expect(failed.volume.attachments['att-1']).toMatchObject({ status: 'error_attaching', connected: false, connectionInfo: null, updatedAt: T2, connector: c.attachment.connector });
    expect(attachmentOf(r.attachment, failed.volume.attachments['att-1'])).toEqual({ ...failed.attachment, version: r.attachment.version });
  });
});

describe('attachmentOf(item, summary)', () => {
  test('a full-state summary is the authority over an item written before it', () => {
    const r = reserved();
    const c = connect(r.volume, r.attachment, { connector: connectorFor('h1'), connection: localConnection('h1'), now: T1 }, { checkDuplicates: true });
    const done = complete(c.volume, c.attachment, T2);
    // The item as the reserve wrote it: the summary alone saw the connect and the complete.
    expect(withoutVersion(attachmentOf(r.attachment, done.volume.attachments['att-1']))).toEqual(withoutVersion(done.attachment));
    expect(attachmentOf(r.attachment, done.volume.attachments['att-1']).version).toBe(r.attachment.version);
  });

  test('a summary written before it carried the full state (no updatedAt): the item', () => {
    const r = reserved();
    const c = connect(r.volume, r.attachment, { connector: connectorFor('h1'), connection: localConnection('h1'), now: T1 }, { checkDuplicates: true });
    const { connectionInfo: _i, updatedAt: _u, connector: _c, ...old } = c.volume.attachments['att-1']!;
    expect(attachmentOf(c.attachment, old)).toBe(c.attachment);
  });

  test('no summary (the volume no longer lists it) or a tombstone: the item', () => {
    const r = reserved();
    const removed = remove(r.volume, r.attachment, T1);
    expect(attachmentOf(r.attachment, undefined)).toBe(r.attachment);
    expect(attachmentOf(removed.tombstone, r.volume.attachments['att-1'])).toBe(removed.tombstone);
  });

  test('any sequence of transitions: the reserved item merged with the last summary is the last attachment', () => {
    type Step = 'connect' | 'complete' | 'legacy';
    fc.assert(
      fc.property(fc.array(fc.constantFrom<Step>('connect', 'complete', 'legacy'), { maxLength: 6 }), fc.constantFrom('h1', 'h2'), (steps, host) => {
        const r = reserved();
        let { volume, attachment } = r;
        steps.forEach((step, i) => {
          const now = new Date(Date.parse(T3) + i * 1000).toISOString();
          if (step === 'connect') ({ volume, attachment } = connect(volume, attachment, { connector: connectorFor(host), connection: localConnection(host), now }, { checkDuplicates: true }));
          else if (step === 'complete') ({ volume, attachment } = complete(volume, attachment, now));
          else ({ volume, attachment } = legacyAttach(volume, attachment, { instanceUuid: INSTANCE_A, hostName: null, mountpoint: '/dev/vdb', mode: 'rw', now }));
        });
        expect(withoutVersion(attachmentOf(r.attachment, volume.attachments['att-1']))).toEqual(withoutVersion(attachment));
      }),
    );
  });

  test('attachmentOfSummary of a full-state summary keeps its connection info (a complete from it writes it back)', () => {
    const r = reserved();
    const c = connect(r.volume, r.attachment, { connector: connectorFor('h1'), connection: localConnection('h1'), now: T1 }, { checkDuplicates: true });
    const fromSummary = attachmentOfSummary(c.volume, 'att-1', c.volume.attachments['att-1']!, 'demo');
    const done = complete(c.volume, fromSummary, T2);
    expect(done.volume.attachments['att-1']!.connectionInfo).toEqual(c.attachment.connectionInfo);
  });
});

/**
 * What holds a volume a replication made on a site (audit/replica-unowned.ts holdersOf, holderOf),
 * from the volume table's items as the audit scans them: a running operation of the backend, a
 * record naming it (a volume's providerLocation, a drill's COPIES, a failover's LEFT), the
 * backend's drill on that site, and on the primary a volume record of the backend by its name.
 */
import { describe, expect, it } from 'vitest';
import { holderOf, holdersOf } from '../../functions/audit/replica-unowned.js';
import type { SiteVolume } from '../../functions/drivers/volume/driver.js';

const HOST = 'ferry@ebs-r';
const backendItem = (extra: Record<string, unknown> = {}) => ({ pk: `BACKEND#${HOST}`, sk: 'BACKEND', service: { activeBackendId: '' }, ...extra });
const volume = (site: string, location: string, backendName: string, kind: SiteVolume['kind'] = 'volume'): SiteVolume => ({ site, location, backendName, kind, state: 'available', createdAt: 0, inUse: false });
const held = (items: Record<string, unknown>[], v: SiteVolume) => holderOf(holdersOf(items, HOST), v);

describe('holderOf', () => {
  it('nothing holds a volume of a target when the table names it nowhere', () => {
    expect(held([backendItem()], volume('frankfurt', 'vol-1', 'volume-a'))).toBeUndefined();
  });

  it('a running operation of the backend holds everything; an ended one, or another backend\'s, does not', () => {
    const op = (host: string, status: string) => ({ pk: 'REPLOP#op-1', sk: 'OP', kind: 'failover', host, status });
    expect(held([backendItem(), op(HOST, 'running')], volume('frankfurt', 'vol-1', 'volume-a'))).toContain('failover op-1');
    expect(held([backendItem(), op(HOST, 'failed')], volume('frankfurt', 'vol-1', 'volume-a'))).toBeUndefined();
    expect(held([backendItem(), op('ferry@other', 'running')], volume('frankfurt', 'vol-1', 'volume-a'))).toBeUndefined();
  });

  it('a record naming it holds it: a volume\'s providerLocation, a drill\'s COPIES, a failover\'s LEFT', () => {
    const v = volume('frankfurt', 'vol-1', 'volume-a');
    expect(held([backendItem(), { pk: 'VOL#x', sk: 'VOL', id: 'x', host: `${HOST}#gp`, backendName: 'volume-x', providerLocation: 'vol-1' }], v)).toContain('volume x');
    expect(held([backendItem(), { pk: 'REPLOP#d', sk: 'COPIES#00000', copies: [{ volumeId: 'x', backendName: 'volume-a', targetBackendId: 'frankfurt', location: 'vol-1' }] }], v)).toContain('drill d');
    expect(held([backendItem(), { pk: 'REPLOP#f', sk: 'LEFT#00000', replicas: [{ volumeId: 'x', backendName: 'volume-a', targetBackendId: 'frankfurt', location: 'vol-1' }] }], v)).toContain('failover f');
  });

  it('a drill copy is held by the backend\'s drill on its site, not by one on another site', () => {
    const copy = volume('frankfurt', 'vol-1', 'volume-a', 'drill');
    expect(held([backendItem({ drill: { operationId: 'd', target: 'frankfurt', status: 'failed' } })], copy)).toContain('drill d');
    expect(held([backendItem({ drill: { operationId: 'd', target: 'virginia', status: 'active' } })], copy)).toBeUndefined();
  });

  it('on the primary while failed over, a volume record of the backend by its name holds it; in a target the name alone does not', () => {
    const record = { pk: 'VOL#a', sk: 'VOL', id: 'a', host: `${HOST}#gp`, backendName: 'volume-a', providerLocation: 'vol-9' };
    const failedOver = backendItem({ service: { activeBackendId: 'frankfurt' } });
    expect(held([failedOver, record], volume('', 'vol-1', 'volume-a'))).toContain('named volume-a');
    expect(held([failedOver], volume('', 'vol-1', 'volume-a'))).toBeUndefined();
    expect(held([backendItem(), record], volume('virginia', 'vol-1', 'volume-a'))).toBeUndefined();
  });

  it('a volume of the site the backend runs on is its own audit\'s, except a drill copy', () => {
    const failedOver = backendItem({ service: { activeBackendId: 'frankfurt' } });
    expect(held([failedOver], volume('frankfurt', 'vol-1', 'volume-a'))).toContain('runs on frankfurt');
    expect(held([failedOver], volume('frankfurt', 'vol-1', 'volume-a', 'drill'))).toBeUndefined();
  });
});

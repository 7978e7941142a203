import { describe, expect, test } from 'vitest';
import { BadRequest, NotAcceptable } from '../../functions/core/errors.js';
import { COMPUTE_VERSIONS, SHARE_VERSIONS, VOLUME_VERSIONS, negotiateVersion, versionHeaders } from '../../functions/core/microversion.js';

describe('negotiateVersion', () => {
  test('no header means the minimum version', () => {
    expect(negotiateVersion({}, VOLUME_VERSIONS).toString()).toBe('3.0');
    expect(negotiateVersion({}, COMPUTE_VERSIONS).toString()).toBe('2.1');
  });

  test('reads the generic header for its own service only', () => {
    expect(negotiateVersion({ 'openstack-api-version': 'volume 3.44' }, VOLUME_VERSIONS).toString()).toBe('3.44');
    expect(negotiateVersion({ 'openstack-api-version': 'compute 2.60, volume 3.27' }, VOLUME_VERSIONS).toString()).toBe('3.27');
    expect(negotiateVersion({ 'openstack-api-version': 'compute 2.60' }, VOLUME_VERSIONS).toString()).toBe('3.0');
  });

  test('reads the legacy service headers', () => {
    expect(negotiateVersion({ 'x-openstack-manila-api-version': '2.29' }, SHARE_VERSIONS).toString()).toBe('2.29');
    expect(negotiateVersion({ 'x-openstack-nova-api-version': '2.56' }, COMPUTE_VERSIONS).toString()).toBe('2.56');
  });

  test('latest is the maximum', () => {
    expect(negotiateVersion({ 'openstack-api-version': 'volume latest' }, VOLUME_VERSIONS).toString()).toBe('3.70');
  });

  test('out of range is 406, malformed is 400', () => {
    expect(() => negotiateVersion({ 'openstack-api-version': 'volume 3.71' }, VOLUME_VERSIONS)).toThrow(NotAcceptable);
    expect(() => negotiateVersion({ 'openstack-api-version': 'volume 2.0' }, VOLUME_VERSIONS)).toThrow(NotAcceptable);
    expect(() => negotiateVersion({ 'openstack-api-version': 'volume 3.x' }, VOLUME_VERSIONS)).toThrow(BadRequest);
  });

  test('atLeast compares major and minor numerically', () => {
    const v = negotiateVersion({ 'openstack-api-version': 'volume 3.9' }, VOLUME_VERSIONS);
    expect(v.atLeast('3.8')).toBe(true);
    expect(v.atLeast('3.10')).toBe(false);
  });

  test('response headers echo the version as each service spells it', () => {
    const v = negotiateVersion({ 'openstack-api-version': 'volume 3.27' }, VOLUME_VERSIONS);
    expect(versionHeaders(v, VOLUME_VERSIONS)['OpenStack-API-Version']).toBe('volume 3.27');
    const m = negotiateVersion({ 'x-openstack-manila-api-version': '2.29' }, SHARE_VERSIONS);
    expect(versionHeaders(m, SHARE_VERSIONS)['X-OpenStack-Manila-API-Version']).toBe('2.29');
  });
});

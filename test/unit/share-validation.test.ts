/** Manila request validation rows: create body, access rules, extra specs. */
import { describe, expect, test } from 'vitest';
import { ApiVersion } from '../../functions/core/microversion.js';
import { parseCreateShare } from '../../functions/shares/create.js';
import { validateExtraSpecs } from '../../functions/shares/types.js';
import { accessRuleOf, sizeOf, strictBool } from '../../functions/shares/validation.js';

const v = (s: string) => new ApiVersion(2, Number(s.split('.')[1]));

describe('create body', () => {
  test('what the manila CLI sends is accepted', () => {
    const r = parseCreateShare({
      share: { share_proto: 'nfs', size: 1, snapshot_id: null, name: 'x', description: null, metadata: {}, share_network_id: null, share_type: null, is_public: false, availability_zone: null, share_group_id: null, scheduler_hints: {} },
    });
    expect(r).toMatchObject({ shareProto: 'NFS', size: 1, name: 'x', shareType: null, isPublic: false });
  });
  test.each([
    [undefined, /Malformed request body/],
    [{ share: 'x' }, /Malformed request body/],
    [{ share: { size: 1 } }, /share_proto must be specified/],
    [{ share: { share_proto: 'GLUSTERFS', size: 1 } }, /Invalid share protocol provided: GLUSTERFS/],
    [{ share: { share_proto: 'NFS', size: 0 } }, /greater than 0/],
    [{ share: { share_proto: 'NFS', size: 'big' } }, /must be an integer/],
    [{ share: { share_proto: 'NFS', size: 1.5 } }, /must be an integer/],
    [{ share: { share_proto: 'NFS', size: 1, metadata: [] } }, /metadata must be a dict/],
    [{ share: { share_proto: 'NFS', size: 1, snapshot_id: 'abc' } }, /snapshot is not supported/],
    [{ share: { share_proto: 'NFS', size: 1, is_public: 'maybe' } }, /Invalid boolean/],
  ])('%j is a 400', (body, message) => {
    expect(() => parseCreateShare(body)).toThrow(message);
  });
  test('size accepts numeric strings', () => {
    expect(sizeOf('3')).toBe(3);
  });
});

describe('access rules', () => {
  test.each([
    ['ip', '10.0.0.1', '2.72'],
    ['ip', '10.0.0.0/24', '2.0'],
    ['ip', '2001:db8::/64', '2.38'],
    ['user', 'alice', '2.72'],
    ['user', 'DOMAIN\\bob$', '2.72'],
  ])('%s %s at %s is accepted', (type, to, version) => {
    expect(accessRuleOf({ access_type: type, access_to: to }, v(version))).toMatchObject({ accessType: type, accessTo: to, accessLevel: 'rw' });
  });
  test.each([
    [{ access_type: 'ip', access_to: '10.0.0.256' }, '2.72', /Invalid IP address/],
    [{ access_type: 'ip', access_to: '10.0.0.0/33' }, '2.72', /Invalid IP address/],
    [{ access_type: 'ip', access_to: '2001:db8::1' }, '2.37', /Invalid IP address/],
    [{ access_type: 'user', access_to: 'bob' }, '2.72', /Invalid user or group name/],
    [{ access_type: 'ip', access_to: '10.0.0.1', access_level: 'rx' }, '2.72', /Invalid or unsupported share access level/],
    [{ access_type: 'cert', access_to: 'x.example.com' }, '2.72', /not supported/],
    [{ access_type: 'dns', access_to: 'x' }, '2.72', /access types are supported/],
    [{ access_type: 'ip' }, '2.72', /required strings/],
  ])('%j at %s is a 400', (body, version, message) => {
    expect(() => accessRuleOf(body as Record<string, unknown>, v(version))).toThrow(message);
  });
});

describe('extra specs and booleans', () => {
  test('driver_handles_share_servers is required on create, a strict bool', () => {
    expect(() => validateExtraSpecs({}, true)).toThrow(/driver_handles_share_servers/);
    expect(() => validateExtraSpecs({ driver_handles_share_servers: 'maybe' }, true)).toThrow(/Invalid boolean/);
    expect(validateExtraSpecs({ driver_handles_share_servers: false, share_backend_name: 'nfs-a' }, true)).toEqual({ driver_handles_share_servers: 'False', share_backend_name: 'nfs-a' });
    expect(validateExtraSpecs({ share_backend_name: 'nfs-a' }, false)).toEqual({ share_backend_name: 'nfs-a' });
  });
  test.each([['True', true], ['false', false], ['1', true], ['off', false], [true, true]])('strictBool(%j) = %s', (input, out) => {
    expect(strictBool('f', input)).toBe(out);
  });
});

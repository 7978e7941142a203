import { afterEach, describe, expect, test } from 'vitest';
import { Forbidden } from '../../functions/core/errors.js';
import { allowed, authorize, registerPolicies, resetPolicyCache } from '../../functions/core/policy.js';

const admin = { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin'] };
const member = { userId: 'u', projectId: 'p1', isAdmin: false, roles: ['member'] };

registerPolicies({ 'test:admin': 'admin_api', 'test:owner': 'admin_or_owner', 'test:nobody': '!', 'test:anyone': '@' });

afterEach(() => {
  delete process.env.FERRY_POLICY;
  resetPolicyCache();
});

describe('policy rules', () => {
  test('admin_api admits only admins', () => {
    expect(allowed(admin, 'test:admin')).toBe(true);
    expect(allowed(member, 'test:admin')).toBe(false);
  });

  test('admin_or_owner admits the owning project and admins', () => {
    expect(allowed(member, 'test:owner', { projectId: 'p1' })).toBe(true);
    expect(allowed(member, 'test:owner', { projectId: 'p2' })).toBe(false);
    expect(allowed(admin, 'test:owner', { projectId: 'p2' })).toBe(true);
  });

  test('! admits nobody, @ admits everyone', () => {
    expect(allowed(admin, 'test:nobody')).toBe(false);
    expect(allowed(member, 'test:anyone')).toBe(true);
  });

  test('authorize throws Forbidden with the upstream message', () => {
    expect(() => authorize(member, 'test:admin')).toThrow(Forbidden);
    expect(() => authorize(member, 'test:admin')).toThrow("Policy doesn't allow test:admin to be performed.");
  });

  test('FERRY_POLICY overrides a default rule', () => {
    process.env.FERRY_POLICY = JSON.stringify({ 'test:admin': '@' });
    resetPolicyCache();
    expect(allowed(member, 'test:admin')).toBe(true);
  });

  test('an unknown rule in FERRY_POLICY is refused, not ignored', () => {
    process.env.FERRY_POLICY = JSON.stringify({ 'test:admin': 'everyone' });
    resetPolicyCache();
    expect(() => allowed(member, 'test:admin')).toThrow(/unknown rule/);
  });

  test('an action without a rule is a programming error', () => {
    expect(() => allowed(admin, 'test:unregistered')).toThrow(/no policy rule/);
  });

  test('registering one action twice with different rules is refused', () => {
    expect(() => registerPolicies({ 'test:admin': '@' })).toThrow(/registered twice/);
  });
});

/**
 * The API side of cross-cell resize without a stack: the policy's default (nobody) and its
 * FERRY_POLICY override, and where a migrate host may be (any cell only when allowed).
 */
import { afterEach, describe, expect, test, vi } from 'vitest';

// computeNodes reads DynamoDB: a fixed view of the sandbox's hosts instead (the unit tier has no stack).
vi.mock('../../functions/servers/engine.js', async (importOriginal) => ({
  ...(await importOriginal<object>()),
  computeNodes: async () => [
    { cell: { uuid: 'c1', name: 'cell1' }, node: { host: 'cmp1' } },
    { cell: { uuid: 'c1', name: 'cell1' }, node: { host: 'cmp2' } },
    { cell: { uuid: 'c2', name: 'cell2' }, node: { host: 'cmp3' } },
  ],
}));

const { resetPolicyCache } = await import('../../functions/core/policy.js');
const { assertMigrateHost, crossCellAllowed, RESIZE_POLICIES } = await import('../../functions/servers/flows/resize/api.js');
const { BadRequest } = await import('../../functions/core/errors.js');

const admin = { userId: 'admin', projectId: 'admin', isAdmin: true, roles: ['admin'] };
const owner = { userId: 'u', projectId: 'p1', isAdmin: false, roles: ['member'] };
const server = { instance: { projectId: 'p1' }, cell: { uuid: 'c1' } } as never;

afterEach(() => {
  delete process.env.FERRY_POLICY;
  resetPolicyCache();
});

describe('compute:servers:resize:cross_cell', () => {
  test('is denied to everybody by default, admins included', () => {
    expect(RESIZE_POLICIES.crossCell).toBe('compute:servers:resize:cross_cell');
    expect(crossCellAllowed({ auth: admin }, server)).toBe(false);
    expect(crossCellAllowed({ auth: owner }, server)).toBe(false);
  });

  test('FERRY_POLICY admin_or_owner allows the owner and admins, not another project', () => {
    process.env.FERRY_POLICY = JSON.stringify({ 'compute:servers:resize:cross_cell': 'admin_or_owner' });
    resetPolicyCache();
    expect(crossCellAllowed({ auth: owner }, server)).toBe(true);
    expect(crossCellAllowed({ auth: admin }, server)).toBe(true);
    expect(crossCellAllowed({ auth: { ...owner, projectId: 'p2' } }, server)).toBe(false);
  });
});

describe('migrate host', () => {
  test("a host of another cell is not found unless cross-cell moves are allowed", async () => {
    await expect(assertMigrateHost('cmp3', server, false)).rejects.toThrow(new BadRequest('Compute host cmp3 could not be found.'));
    await expect(assertMigrateHost('cmp3', server, true)).resolves.toBeUndefined();
    await expect(assertMigrateHost('cmp2', server, false)).resolves.toBeUndefined();
  });

  test('an unknown host is not found either way', async () => {
    await expect(assertMigrateHost('nope', server, true)).rejects.toBeInstanceOf(BadRequest);
  });
});

/**
 * The real manila CLI (python3-manilaclient 4.1.1) drives the local stack's Manila v2 API in
 * bypass-url/token mode (reference §4.1): create, list, show, access-allow, access-list,
 * share-export-location-list, extend, shrink, pool-list, service-list, delete.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clientEnv, parseListTable, parsePropertyTable } from '../support/cli.js';
import { manilaClient } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and rediscovers versions. */
const SCENARIO_TIMEOUT_MS = 300_000;
const run = promisify(execFile);

let stack: Awaited<ReturnType<typeof useLocalStack>>;
/** The same API over HTTP, as the admin: what the test waits through. */
const api = manilaClient(() => stack.url);

async function manilaRaw(token: string, args: string[]): Promise<{ stdout: string; stderr: string; code: number }> {
  const env = clientEnv();
  try {
    const { stdout, stderr } = await run('manila', ['--os-token', token, '--bypass-url', `${stack.url}/share/v2`, ...args], { env, timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

async function manila(...args: string[]): Promise<string> {
  const r = await manilaRaw('demo:demo', args);
  if (r.code !== 0) throw new Error(`manila ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}

async function manilaAdmin(...args: string[]): Promise<string> {
  const r = await manilaRaw('admin:admin', args);
  if (r.code !== 0) throw new Error(`manila ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
}

/** Waits over HTTP (a fetch, not a Python start per poll) for the share's status, then shows it through the CLI by `ref`. */
async function waitForStatus(id: string, ref: string, status: string): Promise<Record<string, string>> {
  const { status: seen } = await api.statusBecomes(id, [status, 'error'], 40_000);
  expect(seen, `share ${ref}`).toBe(status);
  return parsePropertyTable(await manila('show', ref));
}

beforeAll(async () => {
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => stack?.stop());

describe('manila CLI', () => {
  test(
    'create, list, show, access-allow, access-list, export locations, extend, shrink, delete',
    async () => {
      // Act
      const created = parsePropertyTable(await manila('create', 'NFS', '1', '--name', 'x'));
      // Assess
      expect(created.status).toBe('creating');
      const id = created.id!;
      const shown = await waitForStatus(id, 'x', 'available');
      expect(shown.id).toBe(id);
      expect(shown.share_proto).toBe('NFS');
      expect(shown.task_state).toBe('None');
      const rows = parseListTable(await manila('list'));
      expect(rows.find((r) => r.ID === id)).toMatchObject({ Name: 'x', Status: 'available', 'Share Proto': 'NFS', Size: '1' });

      const allowed = parsePropertyTable(await manila('access-allow', 'x', 'ip', '10.0.0.0/24'));
      expect(allowed).toMatchObject({ access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw' });
      const rules = parseListTable(await manila('access-list', 'x'));
      expect(rules).toHaveLength(1);
      expect(rules[0]).toMatchObject({ access_type: 'ip', access_to: '10.0.0.0/24', access_level: 'rw', state: 'active' });

      const locations = parseListTable(await manila('share-export-location-list', 'x'));
      expect(locations).toHaveLength(1);
      const path = locations[0]!.Path!;
      expect(existsSync(path)).toBe(true);

      // extend and shrink (--wait polls until the share is available again).
      await manila('extend', '--wait', 'x', '3');
      expect(parsePropertyTable(await manila('show', 'x'))).toMatchObject({ status: 'available', size: '3' });
      await manila('shrink', '--wait', 'x', '2');
      expect(parsePropertyTable(await manila('show', 'x'))).toMatchObject({ status: 'available', size: '2' });

      await manila('delete', 'x');
      await eventually(async (note) => note((await api.api('GET', `/shares/${id}`)).status) === 404 || undefined, `share ${id} deleted`, { timeoutMs: 40_000, intervalMs: 200 });
      expect((await manilaRaw('demo:demo', ['show', id])).code).not.toBe(0);
      expect(existsSync(path)).toBe(false);
      expect((await runAudit()).findings).toEqual([]);
    },
    SCENARIO_TIMEOUT_MS,
  );

  test(
    'pool-list and service-list show the backends an operator migrates between',
    async () => {
      const out = await manilaAdmin('pool-list');
      const pools = parseListTable(out);
      expect(pools.map((p) => p.Name), out).toEqual(['ferry@nfs-a#pool0', 'ferry@nfs-b#pool0', 'ferry@nfs-c#pool0']);
      const services = parseListTable(await manilaAdmin('service-list'));
      expect(services.map((s) => `${s.Binary} ${s.Host} ${s.State}`)).toEqual([
        'manila-scheduler ferry up',
        'manila-share ferry@nfs-a up',
        'manila-share ferry@nfs-b up',
        'manila-share ferry@nfs-c up',
      ]);
    },
    SCENARIO_TIMEOUT_MS,
  );
});

/**
 * The lifecycle of openstack-lifecycle.test.ts through openstacksdk (Debian python3-openstacksdk
 * 0.101): test/e2e/sdk/lifecycle.py connects with `openstack.connect(cloud='ferry-demo')` and
 * `'ferry-admin'` from the clouds.yaml the stack writes (OS_CLIENT_CONFIG_FILE and nothing else),
 * and runs image upload, volume, server, attach, cold migration + confirm, live migration,
 * detach, volume delete, share create, access rule, driver-assisted share migration in two phases,
 * then deletes everything. The SDK's own calls and waits where 0.101 has them; its
 * shared_file_system proxy has no access rules nor migration, so those are raw requests through
 * the same proxy (the catalog's endpoint, the token, the microversion header). It prints one JSON
 * line per step, asserted here, and the audit is clean afterwards.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { clientEnv } from '../support/cli.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL('./sdk/lifecycle.py', import.meta.url));
// Debian's interpreter: python3-openstacksdk installs for it, and a pyenv `python3` first on PATH has no openstack module.
const PYTHON = '/usr/bin/python3';
const SCRIPT_TIMEOUT_MS = 480_000;

type Line = { step: string; error?: string; [field: string]: unknown };

let stack: TestLocalStack;
let lines: Line[] = [];
let stderr = '';
let exitCode = 0;

beforeAll(async () => {
  stack = await useLocalStack();
  const env = clientEnv({ OS_CLIENT_CONFIG_FILE: stack.cloudsYaml, LIFECYCLE_PREFIX: 'sdk' });
  let stdout: string;
  try {
    ({ stdout, stderr } = await run(PYTHON, [SCRIPT], { env, timeout: SCRIPT_TIMEOUT_MS }));
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    ({ stdout = '', stderr = '' } = err);
    exitCode = typeof err.code === 'number' ? err.code : 1;
  }
  lines = stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
}, SCRIPT_TIMEOUT_MS + 120_000);
afterAll(async () => stack?.stop());

/** The line of `step`; a missing one or one with an error fails with what the script said. */
function at(step: string): Line {
  const line = lines.find((l) => l.step === step);
  const failed = lines.find((l) => l.error);
  if (!line || line.error) throw new Error(`step ${step}: ${failed ? JSON.stringify(failed) : 'no line'} (exit ${exitCode}; stderr: ${stderr.slice(-2000)})`);
  return line;
}

describe('openstacksdk lifecycle through the generated clouds.yaml', () => {
  test('the script ran every step and exited 0', () => {
    expect(lines.find((l) => l.error)).toBeUndefined();
    expect(lines.map((l) => l.step)).toEqual([
      'connect', 'image', 'volume', 'server', 'attach', 'migrate', 'live_migrate', 'detach', 'volume_delete',
      'share', 'share_access', 'share_migrate', 'cleanup', 'left',
    ]);
    expect(exitCode).toBe(0);
  });

  test('Keystone: two projects from the catalog-driven connections', () => {
    const { demo_project, admin_project } = at('connect');
    expect(demo_project).toMatch(/^[0-9a-f]{32}$/);
    expect(admin_project).toMatch(/^[0-9a-f]{32}$/);
    expect(demo_project).not.toBe(admin_project);
  });

  test('image uploaded and active; volume available; server ACTIVE from that image', () => {
    const image = at('image');
    expect(image).toMatchObject({ status: 'active', size: 64 * 1024 });
    expect(at('volume')).toMatchObject({ status: 'available', size: 1 });
    expect(at('server')).toMatchObject({ status: 'ACTIVE', image: image.id, host: expect.stringMatching(/^cmp[12]$/) });
  });

  test('attach, cold migration + confirm, live migration, detach', () => {
    const server = at('server');
    expect(at('attach')).toMatchObject({ device: '/dev/vdb', volume_status: 'in-use', attached_to: [server.id] });
    const cold = at('migrate');
    expect(cold).toMatchObject({ status: 'ACTIVE', from_host: server.host });
    expect(cold.host).not.toBe(cold.from_host);
    const live = at('live_migrate');
    expect(live).toMatchObject({ status: 'ACTIVE', from_host: cold.host, migrations: ['live-migration', 'migration'] });
    expect(live.host).not.toBe(live.from_host);
    expect(at('detach')).toMatchObject({ volume_status: 'available' });
    expect(at('volume_delete')).toMatchObject({ id: at('volume').id });
  });

  test('share create, access rule, driver-assisted migration to nfs-b', () => {
    expect(at('share')).toMatchObject({ status: 'available', host: 'ferry@nfs-a#pool0' });
    expect(at('share_access')).toMatchObject({ state: 'active', access_to: '10.0.0.0/24' });
    expect(at('share_migrate')).toMatchObject({ task_state: 'migration_success', status: 'available', from_host: 'ferry@nfs-a#pool0', host: 'ferry@nfs-b#pool0' });
  });

  test('everything deleted: nothing left in any list, the audit clean', async () => {
    expect(at('cleanup')).toMatchObject({ share: at('share').id, server: at('server').id, image: at('image').id });
    expect(at('left')).toMatchObject({ volumes: [], servers: [], shares: [], images: [] });
    expect((await runAudit()).findings).toEqual([]);
  });
});

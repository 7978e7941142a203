/**
 * The real openstack CLI (Debian python3-openstackclient) against the local stack with nothing but
 * the clouds.yaml the stack writes at start (infra/local/clouds.ts): password authentication at
 * /identity/v3, the catalog leading the CLI to the volume API, a token's project keeping another
 * project's volume from it, and the admin cloud's project list.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openstackCli } from '../support/cli.js';
import { volumeGone, volumeStatusBecomes } from '../support/volume-waits.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** Each CLI call starts a Python interpreter and authenticates. */
const SCENARIO_TIMEOUT_MS = 240_000;

let stack: TestLocalStack;
let clouds: string;

const openstack = async (cloud: string, args: string[]) => {
  const r = await openstackCli(clouds, cloud, args);
  if (r.code !== 0) throw new Error(`openstack --os-cloud ${cloud} ${args.join(' ')} failed (${r.code}): ${r.stderr}${r.stdout}`);
  return r.stdout;
};
const json = async (cloud: string, args: string[]) => JSON.parse(await openstack(cloud, [...args, '-f', 'json']));

beforeAll(async () => {
  stack = await useLocalStack();
  clouds = stack.cloudsYaml;
});
afterAll(async () => stack?.stop());

describe('openstack CLI with the generated clouds.yaml', () => {
  test('clouds.yaml is where the stack says, in the standard format', () => {
    expect(clouds).toBe(join(stack.dataDir, 'clouds.yaml'));
    const doc = parse(readFileSync(clouds, 'utf8'));
    expect(Object.keys(doc.clouds).sort()).toEqual(['ferry-admin', 'ferry-demo']);
    expect(doc.clouds['ferry-demo']).toMatchObject({
      auth: { auth_url: `${stack.url}/identity/v3`, username: 'demo', project_name: 'demo', user_domain_name: 'Default', project_domain_name: 'Default', password: expect.any(String) },
      region_name: 'RegionOne',
      interface: 'public',
      identity_api_version: 3,
    });
  });

  test('token issue, then a volume created, listed, shown and deleted as demo', async () => {
    const token = await json('ferry-demo', ['token', 'issue']);
    expect(token.project_id).toMatch(/^[0-9a-f]{32}$/);
    expect(token.id.length).toBeGreaterThan(40);

    const created = await json('ferry-demo', ['volume', 'create', '--size', '1', 'cli-vol']);
    expect(created).toMatchObject({ name: 'cli-vol', size: 1 });
    // Waited for over HTTP (a fetch, not a CLI start per poll), then shown through the CLI.
    await volumeStatusBecomes(stack.url, 'admin:admin', created.id, 'available');
    expect(await json('ferry-demo', ['volume', 'show', created.id])).toMatchObject({ id: created.id, status: 'available' });
    const listed = await json('ferry-demo', ['volume', 'list']);
    expect(listed.map((v: { ID: string }) => v.ID)).toContain(created.id);

    // The admin's own volume is not the demo project's: the CLI finds no such volume.
    const adminVolume = await json('ferry-admin', ['volume', 'create', '--size', '1', 'admin-vol']);
    const hidden = await openstackCli(clouds, 'ferry-demo', ['volume', 'show', adminVolume.id]);
    expect(hidden.code).not.toBe(0);
    expect(hidden.stderr).toMatch(/No volume with a name or ID|could not be found/i);

    await openstack('ferry-demo', ['volume', 'delete', created.id]);
    await volumeGone(stack.url, 'admin:admin', created.id);
    expect((await json('ferry-demo', ['volume', 'list'])).map((v: { ID: string }) => v.ID)).not.toContain(created.id);
  }, SCENARIO_TIMEOUT_MS);

  test('ferry-admin lists the projects; ferry-demo may not list users', async () => {
    const projects = await json('ferry-admin', ['project', 'list']);
    expect(projects.map((p: { Name: string }) => p.Name).sort()).toEqual(['admin', 'demo']);
    const users = await openstackCli(clouds, 'ferry-demo', ['user', 'list']);
    expect(users.code).not.toBe(0);
    expect(users.stderr).toContain('HTTP 403');
  }, SCENARIO_TIMEOUT_MS);

  test('a restart keeps the passwords and the project ids', async () => {
    const before = await json('ferry-admin', ['project', 'list']);
    const file = readFileSync(clouds, 'utf8');
    await stack.restart();
    expect(readFileSync(clouds, 'utf8').replace(/127\.0\.0\.1:\d+/g, '')).toBe(file.replace(/127\.0\.0\.1:\d+/g, ''));
    expect(await json('ferry-admin', ['project', 'list'])).toEqual(before);
  }, SCENARIO_TIMEOUT_MS);
});

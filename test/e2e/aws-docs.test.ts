/**
 * docs/aws.md tells a user how to point Debian's cinder, manila and nova CLIs at a deployed API;
 * the block it marks as tested is run here, line for line, against a local stack (the same API and
 * the same CLIs; only the endpoint and the token differ), and must succeed.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { clientEnv, docBlock, fillBlock, parseListTable } from '../../scripts/smoke/cli.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

let stack: TestLocalStack;
beforeAll(async () => {
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => stack?.stop());

test('every command line of the tested block succeeds against a local stack', async () => {
  const block = fillBlock(docBlock(), { api: `${stack.url}/`, token: 'admin:admin', project: 'admin' });
  expect(block).not.toMatch(/<[A-Za-z][^>]*>/);
  const script = `set -euo pipefail\nshopt -s expand_aliases\n${block}`;
  const { stdout } = await promisify(execFile)('bash', ['-c', script], { env: clientEnv(), timeout: 120_000 });
  // `cinder create --name scratch 1` printed the new volume; the pools and hypervisors are the sandbox's.
  expect(stdout).toMatch(/\| name\s+\| scratch\s+\|/);
  expect(stdout).toContain('ferry@nfs-a#pool0');
  expect(stdout).toContain('cmp1');
  expect(parseListTable(stdout).length).toBeGreaterThan(0);
}, 180_000);

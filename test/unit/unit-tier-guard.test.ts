/**
 * The unit tier refuses what would make it slow or flaky (test/support/unit-tier-guard.ts is a
 * setup file of the `unit` project): this file proves the refusal happens, loudly, for each way a
 * test could start DynamoDB Local or touch the network.
 */
import { spawn } from 'node:child_process';
import { createServer as createHttpServer } from 'node:http';
import { connect, createServer } from 'node:net';
import { describe, expect, test } from 'vitest';
import { freePort } from '../../infra/local/ports.js';
import { startDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

const RULE = /unit tier: test\/unit must not .* \(no JVM, no network\)/;

describe('a test/unit file cannot', () => {
  test('listen on a port (net, http, freePort)', async () => {
    expect(() => createServer().listen(0)).toThrow(RULE);
    expect(() => createHttpServer().listen(0, '127.0.0.1')).toThrow(/listen on a port/);
    await expect(freePort()).rejects.toThrow(RULE);
  });

  test('open a network connection (a socket, fetch)', async () => {
    expect(() => connect(9, '127.0.0.1')).toThrow(/open a network connection/);
    const failure = await fetch('http://127.0.0.1:8080/').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(String((failure as { cause?: unknown })?.cause ?? failure)).toMatch(RULE);
  });

  test('start DynamoDB Local, directly or through the test helper', async () => {
    expect(() => spawn('java', ['-version'])).toThrow(/start a JVM/);
    expect(() => spawn('/usr/bin/setpriv', ['--pdeathsig', 'TERM', '--', 'java', '-version'])).toThrow(/start a JVM/);
    await expect(startDynamo()).rejects.toThrow(RULE);
    await expect(useLocalDynamo()).rejects.toThrow(RULE);
  });

  test('but may still run a child process that is not Java', async () => {
    const child = spawn(process.execPath, ['-e', 'process.exit(7)']);
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(7);
  });
});

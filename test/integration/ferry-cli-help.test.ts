/**
 * The `ferry` command as an operator runs it: the real entry point (bin/ferry.mjs) in a child
 * process, with a clean environment (no AWS settings, no credentials, an empty HOME). Each
 * command's help exits 0 with its usage; a command that cannot run says why in one line, with
 * what to do, and exit code 2: no stack trace and no AWS SDK warning unless --debug asks for it.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { setDb } from '../../functions/core/db.js';
import { acquireDataDirLock, writeStackFile, type DataDirLock } from '../../infra/local/data-dir-lock.js';
import { REPO_ROOT } from '../../infra/local/http.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

const run = promisify(execFile);

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

let scratch: string;
/** A data directory no stack holds. */
let noStackDir: string;

/** `ferry ARGS` through bin/ferry.mjs, with only PATH, an empty HOME and `env`. */
async function ferry(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const fullEnv = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: join(scratch, 'home'),
    LANG: 'C.UTF-8',
    // No instance metadata service to wait for on a machine that has none.
    AWS_EC2_METADATA_DISABLED: 'true',
    FERRY_DATA_DIR: noStackDir,
    ...env,
  };
  try {
    const { stdout, stderr } = await run(process.execPath, ['bin/ferry.mjs', ...args], { cwd: REPO_ROOT, env: fullEnv, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { code: typeof err.code === 'number' ? err.code : -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}

const lines = (text: string) => text.split('\n').filter((l) => l.trim() !== '');

/** What must never reach an operator who did not ask for --debug. */
function expectNoNoise(text: string): void {
  expect(text).not.toMatch(/^\s+at /m); // a stack frame
  expect(text).not.toContain('NodeVersionSupportWarning');
  expect(text).not.toContain('Warning:');
  expect(text).not.toContain('$metadata');
}

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'ferry-cli-help-'));
  noStackDir = join(scratch, 'no-stack');
});
afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

describe('ferry help', () => {
  const cases: [string[], string][] = [
    [['audit', '--help'], 'usage: ferry audit [--json] [--repair [--grace SECONDS]]'],
    [['audit', '--repair', '-h'], 'usage: ferry audit [--json] [--repair [--grace SECONDS]]'],
    [['inventory', '--help'], 'usage: ferry inventory apply FILE [--dry-run]\n       ferry inventory show'],
    [['inventory', 'apply', '--help'], 'usage: ferry inventory apply FILE [--dry-run]\n'],
    [['inventory', 'show', '--help'], 'usage: ferry inventory show\n'],
    [['token', 'create', '--help'], 'usage: ferry token create --user USER --project PROJECT [--admin] [--ttl-days N]'],
    [['help', 'audit'], 'usage: ferry audit'],
    [['help', 'inventory', 'apply'], 'usage: ferry inventory apply FILE [--dry-run]\n'],
    [['help', 'token', 'create'], 'usage: ferry token create'],
  ];

  test.each(cases)('ferry %j prints that usage and exits 0', async (args, usage) => {
    // Act
    const res = await ferry(args);

    // Assess: the usage, its options, exit codes and an example, on stdout only.
    expect(res.code).toBe(0);
    expect(res.stdout.startsWith(usage)).toBe(true);
    expect(res.stdout).toContain('exit codes:');
    expect(res.stdout).toMatch(/^examples?:\n {2}.*\bferry /m);
    expect(res.stderr).toBe('');
  });

  test('ferry help alone prints every command; help for an unknown one is a usage mistake', async () => {
    const all = await ferry(['help']);
    expect(all.code).toBe(0);
    expect(all.stdout).toMatch(/ferry audit[\s\S]*ferry inventory apply[\s\S]*ferry help \[COMMAND/);

    const unknown = await ferry(['help', 'frobnicate']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('ferry: no help for "frobnicate"');
  });

  test("a usage mistake prints the command's own usage, exit 2", async () => {
    const res = await ferry(['audit', '--grace', '5']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/^ferry: --grace goes with --repair\nusage: ferry audit /);
  });
});

describe('ferry when it cannot run', () => {
  test('audit with no stack and nothing configured: one line saying what to do, exit 2', async () => {
    // Act
    const res = await ferry(['audit']);

    // Assess
    expect(res.code).toBe(2);
    expect(res.stdout).toBe('');
    expect(lines(res.stderr)).toHaveLength(1);
    expect(res.stderr).toContain(`ferry: no local stack is running for FERRY_DATA_DIR=${noStackDir}`);
    expect(res.stderr).toContain('`npm start`');
    expect(res.stderr).toContain('FERRY_TABLE_VOLUME');
    expectNoNoise(res.stderr);
  });

  test('a deployed stack named but no AWS credentials: one line, not the SDK error; --debug adds it', async () => {
    // Act
    const plain = await ferry(['audit'], { FERRY_TABLE_VOLUME: 'Ferry-TableVolume-X' });
    const debug = await ferry(['audit', '--debug'], { FERRY_TABLE_VOLUME: 'Ferry-TableVolume-X' });
    const viaEnv = await ferry(['token', 'create', '--user', 'u', '--project', 'p'], { FERRY_TABLE_TOKENS: 'Ferry-TableTokens-X', FERRY_DEBUG: '1' });

    // Assess
    expect(plain.code).toBe(2);
    expect(lines(plain.stderr)).toHaveLength(1);
    expect(plain.stderr).toMatch(/no AWS credentials found: for a deployed stack set AWS_PROFILE .*`npm start`/);
    expect(plain.stderr).not.toContain('CredentialsProviderError');
    expectNoNoise(plain.stderr);
    expect(debug.code).toBe(2);
    expect(lines(debug.stderr)[0]).toBe(lines(plain.stderr)[0]);
    expect(debug.stderr).toContain('CredentialsProviderError: Could not load credentials from any providers');
    expect(debug.stderr).toMatch(/^\s+at /m);
    expect(viaEnv.code).toBe(2);
    expect(viaEnv.stderr).toContain("ferry: cannot use the deployed stack's table Ferry-TableTokens-X in us-east-1: no AWS credentials found");
    expect(viaEnv.stderr).toContain('CredentialsProviderError');
  });

  test('a local endpoint nothing answers on: one line naming it and what to do, exit 2', async () => {
    // Act: port 9 on loopback (discard) is closed here.
    const res = await ferry(['inventory', 'show'], { FERRY_DYNAMODB_ENDPOINT: 'http://127.0.0.1:9' });

    // Assess
    expect(res.code).toBe(2);
    expect(lines(res.stderr)).toEqual([
      'ferry: inventory show could not read the stack (DynamoDB at http://127.0.0.1:9): nothing answers at 127.0.0.1:9 (ECONNREFUSED): ' +
        'start the local stack with `npm start` and unset FERRY_DYNAMODB_ENDPOINT (ferry finds a running stack by itself), or set it to a DynamoDB that runs',
    ]);
    expectNoNoise(res.stderr);
  }, 60_000);
});

describe('ferry against DynamoDB', () => {
  let ddb: LocalDynamo;
  let stackDir: string;
  let lock: DataDirLock;
  beforeAll(async () => {
    ddb = await useLocalDynamo();
    // A running stack as `ferry` finds it: the data directory held, its stack.json naming the endpoint.
    stackDir = join(scratch, 'stack');
    lock = acquireDataDirLock(stackDir);
    // As a stack started with FERRY_TABLE_PREFIX writes it (infra/local/stack.ts).
    writeStackFile(lock, { url: 'http://127.0.0.1:8780', dynamodbEndpoint: ddb.endpoint, tablePrefix: process.env.FERRY_TABLE_PREFIX });
  });
  afterAll(async () => {
    lock?.release();
    await ddb?.stop();
    setDb(undefined);
  });

  test('a plain `ferry inventory show` against a running stack prints what it holds and nothing else', async () => {
    // Act: the tables of this file (their prefix) found through the stack's stack.json alone.
    const res = await ferry(['inventory', 'show'], { FERRY_DATA_DIR: stackDir });

    // Assess
    expect(res.code).toBe(0);
    expect(res.stdout).not.toBe('');
    expect(res.stderr).toBe('');
  });

  test('a FERRY_TABLE_* that names no table: one line naming the variable, exit 2', async () => {
    // Act
    const res = await ferry(['audit'], { FERRY_DYNAMODB_ENDPOINT: ddb.endpoint, FERRY_TABLE_VOLUME: 'no-such-table' });

    // Assess
    expect(res.code).toBe(2);
    expect(lines(res.stderr)).toHaveLength(1);
    expect(res.stderr).toContain('a table ferry needs does not exist in us-east-1');
    expect(res.stderr).toContain("set FERRY_TABLE_VOLUME to the deployed stack's table names");
    expectNoNoise(res.stderr);
  });
});

describe('ferry into a pipe that closes', () => {
  test('a reader that goes away (| head) ends the command quietly, exit 0, no stack trace', async () => {
    // Act: `true` reads nothing and exits, so the command's first write meets a closed pipe.
    const res = await new Promise<{ code: number | null; stderr: string }>((resolvePipe) => {
      execFile('bash', ['-c', `set -o pipefail; "${process.execPath}" bin/ferry.mjs help | true`], { cwd: REPO_ROOT, timeout: 60_000 }, (error, _stdout, stderr) =>
        resolvePipe({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stderr }),
      );
    });

    // Assess
    expect(res.stderr).not.toContain('EPIPE');
    expect(res.code).toBe(0);
  });
});

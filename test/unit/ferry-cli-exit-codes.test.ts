/**
 * `ferry audit` tells "could not run" (exit 2, in words) from "found something" (exit 1): with no
 * local stack for the data directory and no deployment configured it says so instead of an SDK
 * credentials exception.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { main, type Io } from '../../bin/ferry.js';

function capture(): { io: Io; out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (l) => out.push(l), err: (l) => err.push(l) }, out, err };
}

const saved = { ...process.env };
afterEach(() => {
  for (const k of ['FERRY_DATA_DIR', 'FERRY_DYNAMODB_ENDPOINT', 'FERRY_TABLE_VOLUME']) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

/** An empty data directory and nothing configured; returns the directory. */
function noStack(): string {
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-cli-'));
  process.env.FERRY_DATA_DIR = dataDir;
  delete process.env.FERRY_DYNAMODB_ENDPOINT;
  delete process.env.FERRY_TABLE_VOLUME;
  return dataDir;
}

describe('ferry audit without a stack', () => {
  test('exits 2 and names the data directory it looked in', async () => {
    // Prepare: an empty data directory, nothing configured.
    const dataDir = noStack();
    const c = capture();
    // Act
    const code = await main(['audit'], c.io);
    // Assess
    expect(code).toBe(2);
    expect(c.err.join('\n')).toContain(`no local stack is running for FERRY_DATA_DIR=${dataDir}`);
    expect(c.err.join('\n')).not.toMatch(/CredentialsProviderError/);
    expect(c.out).toEqual([]);
  });

  test('--grace without --repair, or not a number of seconds, is a usage mistake: exit 2 before any stack is looked for', async () => {
    noStack();
    const alone = capture();
    expect(await main(['audit', '--grace', '60'], alone.io)).toBe(2);
    expect(alone.err.join('\n')).toContain('--grace goes with --repair');
    const words = capture();
    expect(await main(['audit', '--repair', '--grace', 'soon'], words.io)).toBe(2);
    expect(words.err.join('\n')).toContain('--grace must be a number of seconds, not "soon"');
  });

  test('audit --repair with no stack exits 2 with the reason, like audit', async () => {
    const dataDir = noStack();
    const c = capture();
    expect(await main(['audit', '--repair'], c.io)).toBe(2);
    expect(c.err.join('\n')).toContain(`no local stack is running for FERRY_DATA_DIR=${dataDir}`);
  });

  test('audit --repair against a deployed stack without the server machines\' ARNs exits 2 and names them', async () => {
    delete process.env.FERRY_DYNAMODB_ENDPOINT;
    process.env.FERRY_TABLE_VOLUME = 'Ferry-TableVolume';
    const c = capture();
    expect(await main(['audit', '--repair'], c.io)).toBe(2);
    expect(c.err.join('\n')).toMatch(/needs the server, snapshot-create and image-import machines' ARNs: set FERRY_SM_SNAPSHOT_CREATE, FERRY_SM_IMAGE_IMPORT, FERRY_SM_SERVER_CREATE, .*FERRY_SM_SERVER_REVERT_RESIZE/);
  });

  test('help names the three exit codes', async () => {
    const c = capture();
    expect(await main(['help'], c.io)).toBe(0);
    expect(c.out.join('\n')).toContain('exit 0 clean, 1 findings, 2 could not run');
    expect(c.out.join('\n')).toContain('ferry audit [--json] [--repair [--grace SECONDS]]');
  });
});

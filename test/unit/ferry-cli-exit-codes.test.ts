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

describe('ferry audit without a stack', () => {
  test('exits 2 and names the data directory it looked in', async () => {
    // Prepare: an empty data directory, nothing configured.
    const dataDir = mkdtempSync(join(tmpdir(), 'ferry-cli-'));
    process.env.FERRY_DATA_DIR = dataDir;
    delete process.env.FERRY_DYNAMODB_ENDPOINT;
    delete process.env.FERRY_TABLE_VOLUME;
    const c = capture();
    // Act
    const code = await main(['audit'], c.io);
    // Assess
    expect(code).toBe(2);
    expect(c.err.join('\n')).toContain(`no local stack is running for FERRY_DATA_DIR=${dataDir}`);
    expect(c.err.join('\n')).not.toMatch(/CredentialsProviderError/);
    expect(c.out).toEqual([]);
  });

  test('help names the three exit codes', async () => {
    const c = capture();
    expect(await main(['help'], c.io)).toBe(0);
    expect(c.out.join('\n')).toContain('exit 0 clean, 1 findings, 2 could not run');
  });
});

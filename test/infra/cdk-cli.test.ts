/**
 * The real CLI, as an operator runs it: `npx cdk synth --quiet` from the repository root, offline
 * (no credentials, no Docker). It runs cdk.json's app, bundles every function with the local
 * esbuild and applies the cdk-nag plugin, so a finding nobody acknowledged fails it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { FUNCTIONS } from '../../functions/wiring.js';

const ROOT = resolve(import.meta.dirname, '../..');
const outdir = mkdtempSync(join(tmpdir(), 'ferry-cdk-out-'));
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

test('npx cdk synth --quiet exits 0 and writes the Ferry template', () => {
  const started = Date.now();
  const run = spawnSync('npx', ['cdk', 'synth', '--quiet', '--output', outdir], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 180_000,
    env: {
      ...process.env,
      CDK_DISABLE_CLI_TELEMETRY: 'true',
      AWS_EC2_METADATA_DISABLED: 'true',
      // No credentials may be needed: make sure none are picked up from the environment.
      AWS_ACCESS_KEY_ID: '',
      AWS_SECRET_ACCESS_KEY: '',
      AWS_PROFILE: '',
    },
  });
  expect(run.status, `${run.stdout}\n${run.stderr}`).toBe(0);
  const template = JSON.parse(readFileSync(join(outdir, 'Ferry.template.json'), 'utf8')) as { Resources: Record<string, { Type: string }> };
  expect(Object.values(template.Resources).filter((r) => r.Type === 'AWS::Lambda::Function')).toHaveLength(FUNCTIONS.length);
  expect(existsSync(join(outdir, 'manifest.json'))).toBe(true);
  console.info(`cdk synth took ${((Date.now() - started) / 1000).toFixed(1)} s`);
}, 200_000);

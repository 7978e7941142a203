/**
 * The Lambda bundles keep class names: the state machines' Retry and Catch match errors by name
 * (`DriverError`, `ConcurrentModification`, `BackendNotReady`), and a minifier renames classes.
 * Built with the stack's own bundling options, a step's errors must keep their names; without
 * keepNames they do not (the check can fail).
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { expect, test } from 'vitest';
import { LAMBDA_BUNDLING, REPO_ROOT } from '../../infra/aws/ferry-stack.js';

/** Bundles a tiny entry that throws Ferry's errors, as CDK bundles a function, and returns the names the errors carry. */
async function namesWhenBundled(keepNames: boolean | undefined): Promise<string[]> {
  const dir = await mkdtemp(join(REPO_ROOT, '.bundling-test-'));
  const entry = join(dir, 'entry.ts');
  await writeFile(
    entry,
    `import { BackendNotReady, ConcurrentModification, DriverError } from ${JSON.stringify(resolve(REPO_ROOT, 'functions/core/errors.ts'))};\n` +
      `export const names = [new DriverError('x').name, new ConcurrentModification('x').name, new BackendNotReady('x').name];\n`,
  );
  const out = join(dir, 'out.mjs');
  await build({ entryPoints: [entry], outfile: out, bundle: true, platform: 'node', format: 'esm', minify: LAMBDA_BUNDLING.minify, keepNames, external: LAMBDA_BUNDLING.externalModules, logLevel: 'silent' });
  try {
    return (await import(pathToFileURL(out).href)).names as string[];
  } finally {
    await import('node:fs/promises').then((fs) => fs.rm(dir, { recursive: true, force: true }));
  }
}

test("with the stack's bundling, errors keep the names the state machines match on", async () => {
  expect(LAMBDA_BUNDLING.keepNames).toBe(true);
  expect(await namesWhenBundled(LAMBDA_BUNDLING.keepNames)).toEqual(['DriverError', 'ConcurrentModification', 'BackendNotReady']);
});

test('minified without keepNames they would not', async () => {
  expect(await namesWhenBundled(false)).not.toContain('DriverError');
});

/**
 * A function's bundle as CDK builds it (infra/aws/ferry-stack.ts LAMBDA_BUNDLING: ESM for Node 22,
 * `@aws-sdk/*` left to the Lambda runtime), in memory, with esbuild's metafile: which modules it
 * contains (the permission test) and how it reaches the external ones (static or dynamic import).
 */
import { resolve } from 'node:path';
import { build, type Metafile } from 'esbuild';

const ROOT = resolve(import.meta.dirname, '../..');

/** @param entry a module path from the repository root (a wiring table `entry`) */
export async function lambdaBundle(entry: string, outdir = '/tmp/ferry-test-bundle'): Promise<Metafile> {
  const out = await build({
    entryPoints: [resolve(ROOT, entry)],
    bundle: true,
    write: false,
    metafile: true,
    platform: 'node',
    format: 'esm',
    target: 'node22',
    mainFields: ['module', 'main'],
    external: ['@aws-sdk/*'],
    outdir,
    logLevel: 'silent',
  });
  return out.metafile;
}

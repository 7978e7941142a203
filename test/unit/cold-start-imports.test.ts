/**
 * SDK modules only some requests need are loaded on first use, not when the Lambda starts: the
 * image API's presigner (a download on AWS), its S3 client, the identity bootstrap's Secrets
 * Manager client, and in every function the EC2, EFS, ECS, S3 and Step Functions clients (issue 13:
 * `@aws-sdk/client-ec2` alone cost 1.1 s when every volume and compute bundle loaded it up front).
 * Checked on the bundle as the stack builds it (ESM, DynamoDB's SDK bundled, the other clients
 * left to the runtime, infra/aws/sdk-bundling.ts): each such module must be reached only by a
 * dynamic import(), and none of them bundled.
 */
import { describe, expect, test } from 'vitest';
import { FUNCTIONS } from '../../functions/wiring.js';
import type { Metafile } from 'esbuild';
import { evaluatedAtImport, lambdaBundle } from '../support/bundle.js';

/** Bundled inputs from an AWS SDK client package: the DynamoDB client may be bundled (every request needs it), no other. */
const bundledClients = (inputs: string[]) => [...new Set(inputs.map((p) => /node_modules\/(@aws-sdk\/client-[^/]+)\//.exec(p)?.[1]).filter((c) => c !== undefined))];

/**
 * No function's import evaluates zod: the fault injection every driver-calling function imports
 * checks its faults by hand (zod was about half of what those bundles evaluated at import,
 * bench:imports), and the inventory's deploy function loads the apply (and its schema) on its first
 * Create or Update.
 */
const evaluatesZod = (bundle: Metafile, entry: string) => [...evaluatedAtImport(bundle, entry).inputs.keys()].some((p) => p.includes('node_modules/zod/'));

/** How a bundle reaches each external module: static import, dynamic import, or both. */
function externalImports(bundle: Metafile): Map<string, Set<string>> {
  const kinds = new Map<string, Set<string>>();
  for (const output of Object.values(bundle.outputs)) {
    for (const i of output.imports.filter((x) => x.external)) kinds.set(i.path, (kinds.get(i.path) ?? new Set()).add(i.kind));
  }
  return kinds;
}

describe('modules loaded on first use', () => {
  test.each([
    ['functions/api/image.ts', '@aws-sdk/s3-request-presigner'],
    ['functions/api/image.ts', '@aws-sdk/client-s3'],
    ['functions/identity/bootstrap.ts', '@aws-sdk/client-secrets-manager'],
  ])('%s reaches %s by dynamic import() only', async (entry, module) => {
    const kinds = externalImports(await lambdaBundle(entry));
    expect(kinds.get(module)).toEqual(new Set(['dynamic-import']));
  });

  test.each(FUNCTIONS.map((f) => [f.name, f.entry]))('%s reaches every AWS SDK module the runtime provides by dynamic import() only, bundles no SDK client but DynamoDB\'s, and evaluates no zod at import', async (_name, entry) => {
    const bundle = await lambdaBundle(entry);
    const staticSdk = [...externalImports(bundle)].filter(([path, kinds]) => path.startsWith('@aws-sdk/') && [...kinds].some((k) => k !== 'dynamic-import')).map(([path]) => path);
    expect(staticSdk).toEqual([]);
    expect(bundledClients(Object.keys(bundle.inputs)).filter((c) => c !== '@aws-sdk/client-dynamodb')).toEqual([]);
    expect(evaluatesZod(bundle, entry)).toBe(false);
  });

  test('the checks can fail: the image API bundles the DynamoDB client (it needs it for every request), and a bundle built with every SDK module inside carries EC2\'s', async () => {
    expect(bundledClients(Object.keys((await lambdaBundle('functions/api/image.ts')).inputs))).toEqual(['@aws-sdk/client-dynamodb']);
    expect(bundledClients(Object.keys((await lambdaBundle('functions/api/volume.ts', undefined, [])).inputs))).toContain('@aws-sdk/client-ec2');
  });

  test('the zod check can fail: the copy worker validates its job with zod at import', async () => {
    expect(evaluatesZod(await lambdaBundle('functions/copy/main.ts'), 'functions/copy/main.ts')).toBe(true);
  });

  test('a copy thread loads only the copy and its errors, no logger: every copy starts each thread anew, and Powertools made up 75 of its 84 KB', async () => {
    const inputs = Object.keys((await lambdaBundle('functions/copy/thread.ts')).inputs).filter((p) => !p.startsWith('node:'));
    expect(inputs.filter((p) => p.includes('node_modules/'))).toEqual([]);
    expect(inputs.map((p) => p.replace(/^.*functions\//, 'functions/')).sort()).toEqual(['functions/copy/errors.ts', 'functions/copy/file-copy.ts', 'functions/copy/thread.ts', 'functions/core/errors.ts']);
  });
});

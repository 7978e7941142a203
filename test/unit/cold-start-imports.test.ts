/**
 * SDK modules only some requests need are loaded on first use, not when the Lambda starts: the
 * image API's presigner (a download on AWS), its S3 client, the identity bootstrap's Secrets
 * Manager client, and in every function the EC2, EFS, ECS, S3 and Step Functions clients (issue 13:
 * `@aws-sdk/client-ec2` alone cost 1.1 s when every volume and compute bundle loaded it up front).
 * Checked on the bundle as the stack builds it (ESM, `@aws-sdk/*` left to the runtime): each such
 * module must be reached only by a dynamic import().
 */
import { describe, expect, test } from 'vitest';
import { FUNCTIONS } from '../../functions/wiring.js';
import { lambdaBundle } from '../support/bundle.js';

/** The SDK modules a function may import up front: DynamoDB's, which nearly every request needs. */
const STATIC_SDK = new Set(['@aws-sdk/client-dynamodb', '@aws-sdk/lib-dynamodb', '@aws-sdk/util-dynamodb']);

/** How the bundle of `entry` reaches each external module: static import, dynamic import, or both. */
async function externalImports(entry: string): Promise<Map<string, Set<string>>> {
  const kinds = new Map<string, Set<string>>();
  for (const output of Object.values((await lambdaBundle(entry)).outputs)) {
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
    const kinds = await externalImports(entry);
    expect(kinds.get(module)).toEqual(new Set(['dynamic-import']));
  });

  test.each(FUNCTIONS.map((f) => [f.name, f.entry]))('%s reaches every AWS SDK module but DynamoDB\'s by dynamic import() only', async (_name, entry) => {
    const staticSdk = [...(await externalImports(entry))].filter(([path, kinds]) => path.startsWith('@aws-sdk/') && !STATIC_SDK.has(path) && [...kinds].some((k) => k !== 'dynamic-import')).map(([path]) => path);
    expect(staticSdk).toEqual([]);
  });

  test('the check can fail: the image API imports DynamoDB statically (it needs it for every request)', async () => {
    expect((await externalImports('functions/api/image.ts')).get('@aws-sdk/lib-dynamodb')).toContain('import-statement');
  });
});

/**
 * Which AWS SDK modules a Lambda bundle leaves to the runtime (nodejs22.x ships SDK v3) and which it
 * carries itself. Every function needs DynamoDB on its first request, so the DynamoDB client is
 * bundled: minified into the one file, it loads in a fraction of what the runtime's copy costs,
 * which Node resolves and reads as a few hundred separate files (bench:imports, 27 Nov 2026, the
 * authorizer: 150 ms of CPU to import against 490 ms with `@aws-sdk/*` external, load 17). The
 * clients only some requests need stay external and are reached by dynamic import() on first use
 * (test/unit/cold-start-imports.test.ts), so no bundle carries, or loads up front, EC2's 1.1 s.
 * A new SDK client goes in this list (else it is bundled too: bigger, not wrong).
 */
export const RUNTIME_SDK_MODULES = [
  '@aws-sdk/client-ec2',
  '@aws-sdk/client-ecs',
  '@aws-sdk/client-efs',
  '@aws-sdk/client-s3',
  '@aws-sdk/client-secrets-manager',
  '@aws-sdk/client-sfn',
  '@aws-sdk/s3-request-presigner',
];

import { defineConfig } from 'vitest/config';

/**
 * Four tiers, one vitest project each (README "Tests"):
 *   unit        pure code, files, mocked SDK clients: no JVM, no network (enforced by
 *               test/support/unit-tier-guard.ts). Runs first, all files in parallel.
 *   integration functions against DynamoDB Local or a whole local stack (s3rver, the local Step
 *               Functions, the HTTP server). The files share one DynamoDB Local, each under
 *               its own table-name prefix (test/support/shared-dynamo.ts).
 *   e2e         the upstream OpenStack CLIs against a local stack (one shared DynamoDB Local too).
 *   infra       the CDK app, the ASL files, the copy worker's container entry point.
 * The stack-starting tiers run after the unit tier, two files at a time: each file's JVM and
 * flows keep a core busy on a 2-core machine.
 */
const shared = {
  testTimeout: 60_000,
  hookTimeout: 120_000,
  setupFiles: ['test/support/setup.ts'],
};

const unitTier = {
  ...shared,
  setupFiles: [...shared.setupFiles, 'test/support/unit-tier-guard.ts'],
  sequence: { groupOrder: 0 },
};

/**
 * Unit files that set process-wide state (process.env, vi.mock/spyOn/useFakeTimers, the fault
 * table of functions/core/faults.ts) or that failed beside them in a shared registry (a driver
 * wrapped by FERRY_FAULTS another file left set). A new unit file that sets such state goes here.
 */
const UNIT_ISOLATED = [
  'compute-driver-sparse-moves', 'compute-driver-sparse', 'core-policy', 'cross-cell-api', 'faults', 'ferry-cli-exit-codes',
  'image-download', 'live-migration-progress', 'reconcile-loop', 'share-driver-migration-copy',
  'attachment-api-shapes', 'share-driver-local', 'volume-scheduler', 'compute-driver-writeback', 'compute-driver-move-durability',
  'compute-driver-block-kernel-copy',
].map((f) => `test/unit/${f}.test.ts`);

export default defineConfig({
  test: {
    ...shared,
    maxWorkers: 2,
    projects: [
      // The unit files share one module registry per worker (isolate: false): each file's imports
      // (the AWS SDK, zod schemas, the handlers) load once per worker, not once per file, which
      // cut the tier from ~156 to ~70 CPU s at the same load. A file that changes process-wide state (the
      // environment, vi.mock/spyOn, a module's fault table) or reads what another changes runs
      // in its own registry (UNIT_ISOLATED), as every file did before.
      { test: { ...unitTier, name: 'unit', include: ['test/unit/**/*.test.ts'], exclude: UNIT_ISOLATED, isolate: false } },
      { test: { ...unitTier, name: 'unit-isolated', include: UNIT_ISOLATED } },
      {
        test: {
          ...shared,
          name: 'integration',
          include: ['test/integration/**/*.test.ts', 'test/crash/subset.test.ts', 'test/crash/subset-ebs.test.ts'],
          globalSetup: ['test/support/shared-dynamo.ts'],
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          ...shared,
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          // The openstack CLI lifecycle with its internal checks (hosts, attachments, the audit)
          // takes four minutes; the README test runs the same steps through the same CLI in
          // `npm test`, so this file runs in `npm run test:lifecycle` (FERRY_CLI_LIFECYCLE=1).
          exclude: process.env.FERRY_CLI_LIFECYCLE ? [] : ['test/e2e/openstack-lifecycle.test.ts'],
          globalSetup: ['test/support/shared-dynamo.ts'],
          sequence: { groupOrder: 1 },
        },
      },
      // The crash matrix (issue 11): every crash point of every machine, minutes long. Not part of
      // `npm test` (a seeded subset of it is, in test/crash/subset.test.ts with the integration
      // tier): `npm run test:crash` sets FERRY_CRASH_MATRIX and runs this project alone.
      ...(process.env.FERRY_CRASH_MATRIX
        ? [
            {
              test: {
                ...shared,
                name: 'crash',
                include: ['test/crash/**/*.crash.test.ts', 'test/integration/servers-crash.test.ts'],
                testTimeout: 3_600_000,
                sequence: { groupOrder: 1 },
              },
            },
          ]
        : []),
      {
        test: {
          ...shared,
          name: 'infra',
          include: ['test/infra/**/*.test.ts'],
          // One module registry per worker for the whole tier: aws-cdk-lib is imported once, not
          // per file, and so is the engine of its built-in CloudFormation validation, which every
          // synth runs (a WebAssembly module whose set-up costs ~15 CPU s; a singleton of the
          // library). Safe here: these files set no module-level state that another reads, and
          // what they change (PATH, FERRY_BUCKET, the presigner, mocked SDK clients) they put back.
          isolate: false,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});

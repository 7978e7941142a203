/**
 * The order `npm test` hands its files to the two workers (the sequencer of vitest.config.ts):
 * within a group (the unit tier, then the stack tiers), the files known to be long first, longest
 * first, whatever their tier; every other file after them, in vitest's own order (its cache of
 * earlier durations when there is one, else the larger file first).
 *
 * Why: vitest's default keeps each tier's files together (e2e, then infra, then integration, by
 * name) and, on a fresh clone with no cache, runs them in the order it found them. A long file that
 * starts late ends late and alone: the README test (4 minutes, at the user's pace) started after
 * the rest of the e2e tier, and a 30-second file could end alone on one worker while the other sat
 * idle. Longest first is the classic schedule for two workers: the short files fill in at the end.
 *
 * The seconds are each file's test time in the fresh-clone `.ci/run` of 2026-11-27 (ci11, load
 * 3.4-3.7). They only rank files: a stale figure costs some balance, never a test. A new file
 * that runs longer than ~15 s belongs here, unless it is one of the infra tier's in-process files:
 * those run one after another so that a worker's module registry (isolate: false, aws-cdk-lib and
 * its validation engine loaded once) passes from one to the next, which vitest does only for the
 * file queued right behind (permissions.test.ts, 34 s, stays with them for that reason; cdk-cli
 * runs the CLI in a child process and loads nothing of the library).
 */
export const EXPECTED_SECONDS: ReadonlyMap<string, number> = new Map([
  ['test/e2e/readme.test.ts', 245],
  ['test/e2e/manila-migration.test.ts', 95],
  ['test/integration/share-migration-failures.test.ts', 86],
  ['test/integration/fuzz.test.ts', 85],
  ['test/integration/fuzz-servers.test.ts', 58],
  ['test/infra/cdk-cli.test.ts', 55],
  ['test/e2e/ferry-watch.test.ts', 51],
  ['test/e2e/openstack-image-network.test.ts', 47],
  ['test/e2e/conformance.test.ts', 46],
  ['test/e2e/cinder-replication.test.ts', 44],
  ['test/integration/shares-efs-migration.test.ts', 42],
  ['test/integration/authz-matrix.test.ts', 39],
  ['test/e2e/cinder-attachments.test.ts', 34],
  ['test/integration/servers-evacuate-shelve.test.ts', 34],
  ['test/integration/start-stop.test.ts', 32],
  ['test/crash/subset.test.ts', 31],
  ['test/e2e/console.test.ts', 31],
  ['test/e2e/openstacksdk-lifecycle.test.ts', 30],
  ['test/e2e/nova-servers.test.ts', 29],
  ['test/integration/snapshot-create.test.ts', 27],
  ['test/integration/volume-create-from-source.test.ts', 25],
  ['test/e2e/openstack-cli.test.ts', 23],
  ['test/integration/servers-api-gaps.test.ts', 23],
  ['test/integration/shares-efs-host-migration.test.ts', 22],
  ['test/integration/servers-resize.test.ts', 21],
  ['test/integration/replication-failover.test.ts', 21],
  ['test/integration/share-migration-api.test.ts', 21],
  ['test/integration/shares-efs-audit.test.ts', 20],
  ['test/integration/servers-cross-cell.test.ts', 19],
  ['test/e2e/nova-cross-cell.test.ts', 19],
  ['test/integration/share-migration-flows.test.ts', 19],
  ['test/integration/copy-task-definition-repair.test.ts', 19],
  ['test/integration/servers-live-migration.test.ts', 18],
  ['test/integration/ferry-cli-help.test.ts', 18],
  ['test/integration/copy-task.test.ts', 18],
  ['test/integration/shares-efs-resize.test.ts', 17],
  ['test/integration/stack-concurrency-restart.test.ts', 17],
  ['test/integration/volume-api-upstream-shapes.test.ts', 16],
  ['test/e2e/nova-foundation.test.ts', 16],
  ['test/integration/replication-ebs.test.ts', 16],
]);

/** The files in run order: by group, then the known-long ones longest first, then vitest's order. */
export function longestFirst<F>(files: readonly F[], groupOf: (f: F) => number, pathOf: (f: F) => string): F[] {
  const position = new Map(files.map((f, i) => [f, i]));
  const expected = (f: F) => EXPECTED_SECONDS.get(pathOf(f)) ?? 0;
  return [...files].sort((a, b) => groupOf(a) - groupOf(b) || expected(b) - expected(a) || position.get(a)! - position.get(b)!);
}

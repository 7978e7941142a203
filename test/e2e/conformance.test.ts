/**
 * Tempest in CI (issue 15): a small, fast subset of OpenStack's own API tests that pass against
 * Ferry, run as `npm run conformance` runs the whole selection (test/conformance: the generated
 * configuration, dynamic credentials through Ferry's identity, exclude.txt), against a fresh local
 * stack. Each test of the subset must pass: one that fails, errors or is skipped (a flag or a
 * configuration change that hides it) fails this file. docs/conformance.md has the full numbers.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { conformance, report } from '../conformance/run.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

/** A class or two per area: identity, volume admin, compute's volume proxy, a cold and a live migration. */
const SUBSET = [
  'tempest.api.identity.v3.test_api_discovery.TestApiDiscovery.test_list_api_versions',
  'tempest.api.identity.v3.test_api_discovery.TestApiDiscovery.test_identity_v3_existence',
  'tempest.api.identity.v3.test_tokens.TokensV3Test.test_create_token',
  'tempest.api.identity.v3.test_tokens.TokensV3Test.test_validate_token',
  'tempest.api.identity.v3.test_tokens.TokensV3Test.test_token_auth_creation_existence_deletion',
  'tempest.api.identity.v3.test_catalog.IdentityCatalogTest.test_catalog_standardization',
  'tempest.api.identity.admin.v3.test_projects_negative.ProjectsNegativeStaticTestJSON.test_project_create_duplicate',
  'tempest.api.identity.admin.v3.test_projects_negative.ProjectsNegativeStaticTestJSON.test_list_projects_by_unauthorized_user',
  'tempest.api.volume.admin.test_volume_pools.VolumePoolsAdminTestsJSON.test_get_pools_with_details',
  'tempest.api.volume.admin.test_multi_backend.VolumeMultiBackendTest.test_backend_name_reporting',
  'tempest.api.volume.admin.test_volume_quotas.VolumeQuotasAdminTestJSON.test_list_default_quotas',
  'tempest.api.volume.admin.test_qos.QosSpecsTestJSON.test_get_qos',
  'tempest.api.compute.volumes.test_volumes_negative.VolumesNegativeTest.test_volume_get_nonexistent_volume_id',
  'tempest.api.compute.volumes.test_volumes_negative.VolumesNegativeTest.test_delete_invalid_volume_id',
  'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.test_list_migrations',
  'tempest.api.compute.admin.test_migrations.MigrationsAdminTest.test_cold_migration',
  'tempest.api.compute.admin.test_live_migration.LiveMigrationTest.test_live_block_migration',
];

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** Tempest's ids end in [id-...,tags]: each name exactly, up to that bracket. */
const REGEX = `^(${SUBSET.map(escape).join('|')})\\[`;

/** Python starts, a project and user per test class, volumes built at the stack's pace. */
const RUN_TIMEOUT_MS = 600_000;

let stack: TestLocalStack;
let workspace: string | undefined;

beforeAll(async () => {
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => {
  await stack?.stop();
  if (workspace) await rm(workspace, { recursive: true, force: true });
});

test(
  `Tempest: the ${SUBSET.length} tests of the CI subset all pass`,
  async () => {
    let out = '';
    const run = await conformance(stack, { regex: REGEX, concurrency: 2, echo: (s) => (out += s) });
    workspace = run.workspace;
    const status = Object.fromEntries(run.results.map((r) => [r.id, r.status]));
    const failed = run.results.filter((r) => r.status !== 'success');
    // The whole story when it fails: the table, the causes, and Tempest's own output.
    const why = `${report(run.summary)}\n\n${failed.map((f) => `${f.id}: ${f.status}\n${f.reason}`).join('\n\n')}\n\n${out.slice(-6000)}`;
    expect(status, why).toEqual(Object.fromEntries(SUBSET.map((id) => [id, 'success'])));
  },
  RUN_TIMEOUT_MS,
);

/**
 * Ferry's import rules, checked by `npm run lint:deps` (part of `npm test`) and by
 * test/unit/boundaries.test.ts, which also shows that a deliberate upward import fails them.
 *
 * The direction is core <- drivers <- capabilities <- api and steps <- wiring <- infra. Among the
 * capabilities a fixed order (LAYERS below) says who may call whom, so the folders form no cycle;
 * where a lower capability needs an answer from a higher one (Cinder asking Nova whether an
 * attachment is in use, the compute API asking the servers flows to clean up after an evacuation)
 * it declares a port that the entry point fills (see the README's architecture).
 * Dynamic `import()` counts like a static import.
 */
// Lowest first: a folder may import its own and the ones before it, never one after it.
const LAYERS = [
  'core',
  'copy', // the copy worker: files and the operation record, nothing of the drivers
  'drivers',
  'quotas', // quota limits and usage items, and the charge a create writes with its record (Cinder's and Manila's APIs name the resources)
  'messages', // user messages (Cinder's and Manila's /messages): what an asynchronous operation that failed records for its user
  'volumes',
  'snapshots',
  'transfers', // Cinder volume transfers: a volume (and its snapshots) handed to another project
  'replication',
  'attachments',
  'shares',
  'migration',
  'compute',
  'servers',
  'images', // Glance v2 over the image store the servers keep (functions/servers/images.ts)
  'networks', // Neutron v2.0 over the compute foundation's networks and the servers' ports
  'audit',
  'ops', // the read model of operations in flight (ferry ops, ferry watch, the console): reads what the capabilities record
  'auth',
  'identity', // Keystone: users, projects, roles, its tokens in auth's token table
  'inventory', // what a deployment holds (backends, types, cells, hosts, flavors, images): writes through the capabilities
  'api',
];
const F = '(^|/)functions/';

const layerRules = LAYERS.map((layer, i) => ({
  name: `layer-${layer}`,
  comment: `functions/${layer} may import only ${LAYERS.slice(0, i + 1).join(', ')} (and packages)`,
  severity: 'error',
  from: { path: `${F}${layer}/` },
  to: { path: `${F}(${[...LAYERS.slice(i + 1).map((l) => `${l}/`), 'wiring\\.ts'].join('|')})` },
}));

module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: 'no-cycle',
      comment: 'no import cycle, dynamic imports included',
      severity: 'error',
      from: { path: F },
      to: { circular: true },
    },
    {
      name: 'functions-not-infra',
      comment: 'functions/ runs on AWS and locally alike: it never imports infra/ or bin/',
      severity: 'error',
      from: { path: F },
      to: { path: '(^|/)(infra|bin)/' },
    },
    {
      name: 'entries-not-imported',
      comment: 'a step handler module is an entry point: only the wiring (by path), infra and tests reach it',
      severity: 'error',
      from: { path: F },
      to: { path: `${F}[^/]+/steps\\.ts$` },
    },
    {
      name: 'aws-not-local',
      comment: 'the CDK app never imports the embedded local stack, nor the local stack the CDK app',
      severity: 'error',
      from: { path: '(^|/)infra/aws/' },
      to: { path: '(^|/)infra/local/' },
    },
    {
      name: 'no-unresolvable',
      comment: 'an import that resolves to nothing',
      severity: 'error',
      from: {},
      // aws-lambda is types only (@types/aws-lambda); tsx's loader API resolves through export conditions
      to: { couldNotResolve: true, pathNot: '^(aws-lambda|tsx/esm/api)$' },
    },
  ],
  options: {
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
    doNotFollow: { path: 'node_modules' },
    exclude: { path: 'node_modules' },
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.mjs', '.json'] },
  },
};

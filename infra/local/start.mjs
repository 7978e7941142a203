/**
 * `npm start`'s entry: first what the start needs beyond Node (system-check.mjs: scripts/ensure-system.sh,
 * run only when something it checks changed since it last passed), then runs infra/local/main.ts from the start bundle (start-bundle.mjs), built
 * first when there is none for the sources there now (the first start in a checkout, or after an
 * edit), and prints a stage line saying which. A build that fails is said, and the stack runs from
 * the TypeScript through tsx, as it did before the bundle (slower to start, otherwise the same).
 * FERRY_START_BUNDLE=off skips the bundle.
 */
import { performance } from 'node:perf_hooks';
import { startBundle, START_ENTRY, REPO_ROOT } from './start-bundle.mjs';
import { ensureSystem } from './system-check.mjs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** The stage line's shape (start-stages.ts prints the others the same way). */
const stageLine = (name, ms, detail) =>
  console.log(`ferry: ${name.padEnd(18)} ${`${Math.round(ms)} ms`.padStart(8)}  (at ${(performance.now() / 1000).toFixed(2)} s) ${detail}`);

{
  const t0 = performance.now();
  const stale = ensureSystem(REPO_ROOT);
  stageLine('system', performance.now() - t0, stale === undefined ? 'as checked before' : `checked (${stale})`);
}

let bundle;
if (process.env.FERRY_START_BUNDLE !== 'off') {
  const t0 = performance.now();
  try {
    bundle = await startBundle(REPO_ROOT);
    stageLine('bundle', bundle.ms, bundle.state === 'current' ? 'current' : `built (${bundle.reason})`);
  } catch (e) {
    stageLine('bundle', performance.now() - t0, `failed (${e.message.replace(/\s*\n\s*/g, ' ')}); running the TypeScript through tsx`);
  }
}
if (bundle) await import(pathToFileURL(bundle.file).href);
else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(join(REPO_ROOT, START_ENTRY)).href);
}

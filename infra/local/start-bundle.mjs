/**
 * The start bundle (issue 16: a fast start): `npm start` runs the local stack from one ESM bundle
 * of its TypeScript, built by esbuild into `node_modules/.cache/ferry/start/`, instead of
 * transpiling some 400 files through tsx at every start (about 2 s of a start on this 2-core
 * machine, and more under load).
 *
 * What is in it: infra/local/main.ts and every function's handler module of the wiring table, with
 * code splitting, so the stack's modules and each handler stay separate chunks that load when they
 * did before (main.ts imports the stack after the lock; a handler on its first request). Packages
 * stay outside (node_modules is resolved as ever), but for the Step Functions interpreter, built in
 * with three of its imports loaded on first use (interpreterWithLazyClients). Each source's `import.meta.url` is its own
 * file's URL, so paths the code finds from it (the state machines, the inventory, the copy
 * worker's entry, createRequire) are the same as from TypeScript.
 *
 * When it is rebuilt: the record of the last build (`current.json`) names every source file that
 * went into it with a hash of its contents and what stat said of it then (size, inode, change and
 * modification times), plus the tsconfig, this file and esbuild's version. A start stats those
 * files (~5 ms for 335 of them, against 20-60 ms of CPU to hash them) and hashes only one whose stat
 * differs (a write changes its change time, which no tool sets back); it uses the bundle only if
 * every such hash matches (and records the new stats, so a touched file is hashed once); any
 * change (an edit, a pull, a file deleted, a new aws-local-stepfunctions, whose file is built in)
 * rebuilds, and a changed file that now imports a new one has itself changed. The build goes to a temporary directory and is renamed to a directory named
 * by that hash, then the record is replaced whole, so concurrent starts never see half a bundle.
 * A build that fails leaves the caller to run the TypeScript through tsx (start.mjs).
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { writeJsonWhole } from './write-whole.mjs';

const require = createRequire(import.meta.url);

export const START_ENTRY = 'infra/local/main.ts';
const HANDLER_REGISTRY = 'infra/local/handler-modules.ts';
const WIRING = 'functions/wiring.ts';
const RECORD = 'current.json';
const BUNDLE_MAIN = 'start.mjs';
/** Builds kept besides the current one: a stack still running from an older one loads its handler chunks from there. */
const KEEP_BUILDS = 4;

/** The repository this file belongs to. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * Where this checkout's bundles live: one folder per checkout (several worktrees may share one
 * node_modules), under the cache folder npm tools share.
 * @param {string} repoRoot
 */
export function startBundleDir(repoRoot = REPO_ROOT) {
  const checkout = createHash('sha256').update(realpathSync(repoRoot)).digest('hex').slice(0, 12);
  return join(repoRoot, 'node_modules', '.cache', 'ferry', 'start', checkout);
}

/**
 * @typedef {{ key: string; inputs: Record<string, string>; stats?: Record<string, string>; environment: string; builtAt: string }} BuildRecord
 * @typedef {{ file: string; state: 'current' | 'built'; ms?: number; reason?: string }} StartBundle
 */

/** @param {string} file */
const fileHash = (file) => createHash('sha256').update(readFileSync(file)).digest('hex');

/**
 * What stat says of a file, as one string: any write changes it (the change time moves on every
 * write and rename, and no tool can set it back); undefined when the file is gone.
 * @param {string} file
 */
function fileStat(file) {
  const st = statSync(file, { bigint: true, throwIfNoEntry: false });
  return st && `${st.size}:${st.ino}:${st.ctimeNs}:${st.mtimeNs}`;
}

/** Replaces the record whole (a temporary renamed over it), so a concurrent start reads the old or the new one. */
function writeRecord(dir, record) {
  writeJsonWhole(join(dir, RECORD), record);
}

/** What a bundle depends on besides its sources: esbuild's version, the compiler options, this builder. */
function environmentHash(repoRoot) {
  // Its package's version, read rather than loaded: the check runs at every start.
  const esbuildVersion = JSON.parse(readFileSync(require.resolve('esbuild/package.json'), 'utf8')).version;
  return createHash('sha256')
    .update(`${esbuildVersion}\n${fileHash(join(repoRoot, 'tsconfig.json'))}\n${fileHash(fileURLToPath(import.meta.url))}`)
    .digest('hex');
}

/**
 * The current bundle's entry when it was built from exactly the sources there now; else undefined
 * with why (none yet, a source changed or is gone, another esbuild).
 * @param {string} repoRoot
 * @returns {{ file: string } | { stale: string }}
 */
export function currentBundle(repoRoot = REPO_ROOT, dir = startBundleDir(repoRoot)) {
  /** @type {BuildRecord} */
  let record;
  try {
    record = JSON.parse(readFileSync(join(dir, RECORD), 'utf8'));
  } catch (e) {
    if (e.code === 'ENOENT') return { stale: 'no bundle yet' };
    if (e instanceof SyntaxError) return { stale: 'its record is unreadable' };
    throw e;
  }
  const file = join(dir, record.key, BUNDLE_MAIN);
  if (!existsSync(file)) return { stale: 'its files are gone' };
  if (record.environment !== environmentHash(repoRoot)) return { stale: 'esbuild, tsconfig.json or the builder changed' };
  const stats = { ...record.stats };
  let restatted = false;
  for (const [input, hash] of Object.entries(record.inputs)) {
    const path = join(repoRoot, input);
    const stat = fileStat(path);
    if (stat === undefined) return { stale: `${input} is gone` };
    if (stat === stats[input]) continue;
    if (fileHash(path) !== hash) return { stale: `${input} changed` };
    // Touched, not changed (a checkout that rewrote it as it was): hashed this once.
    stats[input] = stat;
    restatted = true;
  }
  if (restatted) writeRecord(dir, { ...record, stats });
  return { file };
}

/** The function entries of the wiring table (functions/wiring.ts), read through a throwaway bundle of it. */
async function functionEntries(esbuild, repoRoot) {
  const out = await esbuild.build({
    entryPoints: [join(repoRoot, WIRING)],
    bundle: true,
    platform: 'node',
    format: 'esm',
    write: false,
    logLevel: 'silent',
    packages: 'external',
  });
  const wiring = await import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString('base64')}`);
  return [...new Set(wiring.FUNCTIONS.map((f) => f.entry))].sort();
}

/**
 * Builds the bundle of the current sources and makes it current; returns its entry.
 * @param {string} repoRoot
 */
export async function buildStartBundle(repoRoot = REPO_ROOT, dir = startBundleDir(repoRoot)) {
  const esbuild = require('esbuild');
  const entries = await functionEntries(esbuild, repoRoot);
  const abs = (p) => JSON.stringify(join(repoRoot, p));
  // The registry first, then main.ts: static imports are hoisted, so main.ts is imported after the registration.
  const entrySource = [
    `import { registerBundledHandlerModules } from ${abs(HANDLER_REGISTRY)};`,
    `registerBundledHandlerModules({`,
    ...entries.map((e) => `  ${JSON.stringify(e)}: () => import(${abs(e)}),`),
    `});`,
    `await import(${abs(START_ENTRY)});`,
  ].join('\n');
  mkdirSync(dir, { recursive: true });
  const temp = join(dir, `tmp-${process.pid}-${Date.now()}`);
  try {
    const result = await esbuild.build({
      stdin: { contents: entrySource, resolveDir: repoRoot, sourcefile: 'ferry-start-entry.mjs', loader: 'js' },
      absWorkingDir: repoRoot,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      outdir: temp,
      entryNames: 'start',
      outExtension: { '.js': '.mjs' },
      chunkNames: 'chunks/[name]-[hash]',
      packages: 'external',
      metafile: true,
      sourcemap: 'linked',
      logLevel: 'silent',
      plugins: [ownFileUrls(repoRoot), interpreterWithLazyClients()],
    });
    const inputs = {};
    const stats = {};
    for (const input of Object.keys(result.metafile.inputs).sort()) {
      // Virtual modules (the entry, the shims) are no file; the interpreter's file in node_modules is one.
      if (!existsSync(join(repoRoot, input))) continue;
      // Stat first: a write between the two leaves a stat that differs from the file's, so the next start hashes it.
      stats[input] = fileStat(join(repoRoot, input));
      inputs[input] = fileHash(join(repoRoot, input));
    }
    const key = createHash('sha256').update(JSON.stringify(inputs)).update(entrySource).digest('hex').slice(0, 16);
    const target = join(dir, key);
    if (existsSync(target)) rmSync(temp, { recursive: true, force: true });
    else {
      try {
        renameSync(temp, target);
      } catch (e) {
        // Another start built the same sources meanwhile: theirs is as good.
        if (e.code !== 'ENOTEMPTY' && e.code !== 'EEXIST') throw e;
        rmSync(temp, { recursive: true, force: true });
      }
    }
    /** @type {BuildRecord} */
    const record = { key, inputs, stats, environment: environmentHash(repoRoot), builtAt: new Date().toISOString() };
    writeRecord(dir, record);
    dropOldBuilds(dir, key);
    return join(target, BUNDLE_MAIN);
  } catch (e) {
    rmSync(temp, { recursive: true, force: true });
    throw e;
  }
}

/** The bundle to run: the current one, or a new build of the sources. */
export async function startBundle(repoRoot = REPO_ROOT, dir = startBundleDir(repoRoot)) {
  const t0 = performance.now();
  const current = currentBundle(repoRoot, dir);
  if ('file' in current) return { file: current.file, state: 'current', ms: performance.now() - t0 };
  const file = await buildStartBundle(repoRoot, dir);
  return { file, state: 'built', reason: current.stale, ms: performance.now() - t0 };
}

/**
 * esbuild plugin: every TypeScript source of the repository keeps its own `import.meta.url` (in a
 * bundle it would be the bundle's), so what it finds next to itself is found as from TypeScript.
 */
function ownFileUrls(repoRoot) {
  return {
    name: 'ferry-own-file-urls',
    setup(build) {
      build.onLoad({ filter: /\.ts$/ }, (args) => {
        if (relative(repoRoot, args.path).startsWith('node_modules')) return undefined;
        const source = readFileSync(args.path, 'utf8');
        return { contents: source.replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href)), loader: 'ts' };
      });
    },
  };
}

/**
 * The packages aws-local-stepfunctions imports at its top only for what Ferry never does locally:
 * invoking a real Lambda for a Task with no local handler (@aws-sdk/client-lambda and
 * @aws-sdk/credential-providers), and validating a definition the validation cache has not seen
 * (asl-validator, asl-validation-cache.ts). Loading them cost a third of the stack's module CPU at
 * every start. In the bundle the interpreter is built in, its imports of these three are shims
 * that load the real package (the one the interpreter would have loaded, resolved from its own
 * file) the first time one is called, and behave as it then. Its other imports stay packages.
 * @type {Record<string, string>}
 */
const LAZY_INTERPRETER_IMPORTS = {
  '@aws-sdk/client-lambda': [
    'export class LambdaClient { constructor(config) { return new (load().LambdaClient)(config); } }',
    'export class InvokeCommand { constructor(input) { return new (load().InvokeCommand)(input); } }',
  ].join('\n'),
  '@aws-sdk/credential-providers': 'export const fromCognitoIdentityPool = (options) => load().fromCognitoIdentityPool(options);',
  // A CommonJS module whose module.exports is the validator: what `import aslValidator from` gives.
  'asl-validator': 'export default (definition, options) => load()(definition, options);',
};

function interpreterWithLazyClients() {
  // The package's "require" entry, beside its "import" one (build/main.node.cjs, build/main.node.esm.js).
  const interpreterDir = dirname(require.resolve('aws-local-stepfunctions'));
  const interpreter = join(interpreterDir, 'main.node.esm.js');
  return {
    name: 'ferry-interpreter-with-lazy-clients',
    setup(build) {
      build.onResolve({ filter: /^aws-local-stepfunctions$/ }, () => ({ path: interpreter }));
      build.onResolve({ filter: /^(@aws-sdk\/client-lambda|@aws-sdk\/credential-providers|asl-validator)$/ }, (args) =>
        args.importer === interpreter ? { path: args.path, namespace: 'ferry-lazy-import' } : undefined,
      );
      build.onLoad({ filter: /.*/, namespace: 'ferry-lazy-import' }, (args) => ({
        contents: [
          "import { createRequire } from 'node:module';",
          `let loaded;`,
          `const load = () => (loaded ??= createRequire(${JSON.stringify(interpreter)})(${JSON.stringify(args.path)}));`,
          LAZY_INTERPRETER_IMPORTS[args.path],
        ].join('\n'),
        loader: 'js',
        resolveDir: interpreterDir,
      }));
    },
  };
}

/** Removes builds other than the current one and the KEEP_BUILDS newest, and temporaries of builds that are gone. */
function dropOldBuilds(dir, currentKey) {
  const builds = readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== currentKey && !d.name.startsWith('tmp-'))
    .map((d) => ({ name: d.name, time: statSync(join(dir, d.name)).mtimeMs }))
    .sort((a, b) => b.time - a.time);
  for (const { name } of builds.slice(KEEP_BUILDS)) rmSync(join(dir, name), { recursive: true, force: true });
}

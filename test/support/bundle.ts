/**
 * A function's bundle as CDK builds it (infra/aws/ferry-stack.ts LAMBDA_BUNDLING: ESM for Node 22,
 * `@aws-sdk/*` left to the Lambda runtime), in memory, with esbuild's metafile: which modules it
 * contains (the permission test) and how it reaches the external ones (static or dynamic import).
 */
import { resolve } from 'node:path';
import { build, type BuildOptions, type Metafile } from 'esbuild';

const ROOT = resolve(import.meta.dirname, '../..');

/** infra/aws/ferry-stack.ts LAMBDA_BUNDLING's options, in memory, with the metafile. */
const AS_CDK_BUNDLES = {
  bundle: true,
  write: false,
  metafile: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  mainFields: ['module', 'main'],
  external: ['@aws-sdk/*'],
  logLevel: 'silent',
} satisfies BuildOptions;

/** @param entry a module path from the repository root (a wiring table `entry`) */
export async function lambdaBundle(entry: string, outdir = '/tmp/ferry-test-bundle'): Promise<Metafile> {
  const out = await build({ ...AS_CDK_BUNDLES, entryPoints: [resolve(ROOT, entry)], outdir });
  return out.metafile;
}

/**
 * The modules each entry's bundle contains (what `lambdaBundle(entry).inputs` lists), for many
 * entries from ONE esbuild build: a file parsed once serves every entry that reaches it, where a
 * build per entry parses the shared core and middleware again each time (the permission test's
 * 3 x 21 builds took ~28 CPU s, this one ~4). Each entry's set is what its imports reach in the
 * build's import graph (external ones left out), which is exactly the inputs of a build of that
 * entry alone: the graph keeps a module tree-shaking drops, as a lone build's `inputs` does.
 * @param entries module paths from the repository root (wiring table `entry`s)
 */
export async function lambdaBundleInputs(entries: readonly string[], outdir = '/tmp/ferry-test-bundles'): Promise<Map<string, Set<string>>> {
  const out = await build({ ...AS_CDK_BUNDLES, entryPoints: entries.map((e) => resolve(ROOT, e)), outdir, absWorkingDir: ROOT });
  const graph = out.metafile.inputs;
  return new Map(
    entries.map((entry) => {
      if (!graph[entry]) throw new Error(`esbuild's metafile has no input ${entry}: not a module path from the repository root`);
      const reached = new Set([entry]);
      const next = [entry];
      while (next.length) {
        for (const i of graph[next.pop()!]!.imports) {
          if (i.external || reached.has(i.path)) continue;
          reached.add(i.path);
          next.push(i.path);
        }
      }
      return [entry, reached];
    }),
  );
}

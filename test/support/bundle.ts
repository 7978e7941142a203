/**
 * A function's bundle as CDK builds it (infra/aws/ferry-stack.ts LAMBDA_BUNDLING: ESM for Node 22,
 * DynamoDB's SDK bundled, the other clients left to the Lambda runtime), in memory, with esbuild's
 * metafile: which modules it contains (the permission test), how it reaches the external ones
 * (static or dynamic import), and what its import evaluates (bench:imports).
 */
import { resolve } from 'node:path';
import { build, type BuildOptions, type Metafile } from 'esbuild';
import { RUNTIME_SDK_MODULES } from '../../infra/aws/sdk-bundling.js';

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
  external: RUNTIME_SDK_MODULES,
  logLevel: 'silent',
} satisfies BuildOptions;

/**
 * @param entry a module path from the repository root (a wiring table `entry`)
 * @param external the modules left out (default: the stack's, those the runtime provides)
 */
export async function lambdaBundle(entry: string, outdir = '/tmp/ferry-test-bundle', external: string[] = RUNTIME_SDK_MODULES): Promise<Metafile> {
  const out = await build({ ...AS_CDK_BUNDLES, entryPoints: [resolve(ROOT, entry)], outdir, external });
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

/** Bytes by input file in the bundle's output(s): what each module adds to the code. */
function bytesByInput(metafile: Metafile): Map<string, number> {
  const bytes = new Map<string, number>();
  for (const output of Object.values(metafile.outputs)) {
    for (const [path, input] of Object.entries(output.inputs)) bytes.set(path, (bytes.get(path) ?? 0) + input.bytesInOutput);
  }
  return bytes;
}

/**
 * What importing the bundle evaluates: the inputs reached from `entry` by static imports (and
 * require calls), with their bytes in the output. An input reached only through a dynamic import()
 * is in the file but runs on first use. Metafile paths are relative to the working directory the
 * bundle was built in (esbuild's default: this process's).
 */
export function evaluatedAtImport(metafile: Metafile, entry: string): { bytes: number; inputs: Map<string, number> } {
  const start = Object.keys(metafile.inputs).find((p) => resolve(p) === resolve(ROOT, entry));
  if (!start) throw new Error(`${entry} is not an input of this bundle`);
  const reached = new Set<string>();
  const todo = [start];
  while (todo.length) {
    const path = todo.pop()!;
    if (reached.has(path)) continue;
    reached.add(path);
    for (const i of metafile.inputs[path]?.imports ?? []) if (!i.external && (i.kind === 'import-statement' || i.kind === 'require-call')) todo.push(i.path);
  }
  const all = bytesByInput(metafile);
  const inputs = new Map([...reached].map((p) => [p, all.get(p) ?? 0]));
  return { bytes: [...inputs.values()].reduce((a, b) => a + b, 0), inputs };
}

/** The `n` largest groups of `inputs`: a package under node_modules by its name, Ferry's own files by folder (`functions/drivers/volume`). */
export function largestByPackage(inputs: Map<string, number>, n: number): [string, number][] {
  const groups = new Map<string, number>();
  for (const [path, bytes] of inputs) {
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1];
    const key = pkg ?? path.split('/').slice(0, -1).slice(0, 3).join('/');
    groups.set(key, (groups.get(key) ?? 0) + bytes);
  }
  return [...groups].sort((a, b) => b[1] - a[1]).slice(0, n);
}

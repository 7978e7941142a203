/**
 * `npm run bench:imports`: the cold start of every Lambda, as its import time. Each function of the
 * wiring table is bundled exactly as CDK bundles it (LAMBDA_BUNDLING: ESM, minified, names kept,
 * the AWS SDK external as the runtime provides it), then imported by a fresh `node` process,
 * BENCH_REPEATS times (default 5), interleaved with a bare `node -e ''` start as the baseline of the
 * same run. Prints per bundle its size, the median import time and the median process wall time
 * against the baseline's; the goal is an import of at most 300 ms. The bundles go under
 * .bench-bundles/ in the repository, so the external @aws-sdk/* resolve from node_modules as they
 * would from the runtime.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { FUNCTIONS } from '../../functions/wiring.js';
import { LAMBDA_BUNDLING, REPO_ROOT } from '../../infra/aws/ferry-stack.js';
import { percentile } from '../support/stats.js';

const GOAL_MS = 300;
const repeats = Number(process.env.BENCH_REPEATS ?? 5);
const outDir = join(REPO_ROOT, '.bench-bundles');
const median = (xs: number[]) => percentile(xs, 50);

function timeProcess(args: string[]): { wallMs: number; out: string } {
  const t0 = performance.now();
  const out = execFileSync(process.execPath, args, { cwd: REPO_ROOT, encoding: 'utf8', env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' } });
  return { wallMs: performance.now() - t0, out };
}

rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });
console.log(`bench:imports  ${FUNCTIONS.length} bundles x ${repeats}, load average at start ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
const rows: { name: string; kb: number; importMs: number; wallMs: number; baselineMs: number }[] = [];
for (const f of FUNCTIONS) {
  const file = join(outDir, `${f.name}.mjs`);
  await build({
    entryPoints: [join(REPO_ROOT, f.entry)],
    outfile: file,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: LAMBDA_BUNDLING.target,
    mainFields: LAMBDA_BUNDLING.mainFields,
    banner: { js: LAMBDA_BUNDLING.banner! },
    minify: LAMBDA_BUNDLING.minify,
    keepNames: LAMBDA_BUNDLING.keepNames,
    external: LAMBDA_BUNDLING.externalModules,
    logLevel: 'error',
  });
  const script = `const t=performance.now(); await import(${JSON.stringify(pathToFileURL(file).href)}); console.log(performance.now()-t)`;
  const imports: number[] = [];
  const walls: number[] = [];
  const baselines: number[] = [];
  for (let i = 0; i < repeats; i++) {
    baselines.push(timeProcess(['-e', '']).wallMs);
    const run = timeProcess(['--input-type=module', '-e', script]);
    imports.push(Number(run.out.trim().split('\n').at(-1)));
    walls.push(run.wallMs);
  }
  rows.push({ name: f.name, kb: Math.round(statSync(file).size / 1024), importMs: median(imports), wallMs: median(walls), baselineMs: median(baselines) });
}
rmSync(outDir, { recursive: true, force: true });

console.log('| function | bundle KB | import ms (median) | process wall ms | bare node ms | wall / bare | goal <= 300 ms |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.name} | ${r.kb} | ${r.importMs.toFixed(0)} | ${r.wallMs.toFixed(0)} | ${r.baselineMs.toFixed(0)} | ${(r.wallMs / r.baselineMs).toFixed(2)} | ${r.importMs <= GOAL_MS ? 'ok' : 'OVER'} |`);
}
const over = rows.filter((r) => r.importMs > GOAL_MS).map((r) => r.name);
console.log(`over ${GOAL_MS} ms: ${over.length ? over.join(', ') : 'none'}; load average at end ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);

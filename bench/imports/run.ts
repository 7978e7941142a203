/**
 * `npm run bench:imports`: the cold start of every Lambda, as its import time. Each function of the
 * wiring table is bundled exactly as CDK bundles it (LAMBDA_BUNDLING: ESM, minified, names kept,
 * the AWS SDK external as the runtime provides it), then imported by a fresh `node` process,
 * BENCH_REPEATS times (default 5), interleaved with a bare node start as the baseline of the same
 * run. The goal is an import of at most 300 ms.
 *
 * Wall times follow the machine's load (other processes take the cores), so each bundle is also
 * measured in what load does not change much: the CPU time of its import (process.cpuUsage() around
 * `await import()`, the best of the repeats) against the bare start's CPU time, and the bytes of
 * JavaScript its import evaluates (the inputs esbuild's metafile reaches from the entry by static
 * imports; what only a dynamic import() reaches is parsed but not run until first use). The largest
 * of those inputs are listed per bundle: what to make lazy next. The bundles go under
 * .bench-bundles/ in the repository, so the external @aws-sdk/* resolve from node_modules as they
 * would from the runtime. BENCH_ONLY=name,name measures only those functions. Benchmarks print;
 * nothing here fails on a figure.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { FUNCTIONS } from '../../functions/wiring.js';
import { LAMBDA_BUNDLING, REPO_ROOT } from '../../infra/aws/ferry-stack.js';
import { evaluatedAtImport, largestByPackage } from '../../test/support/bundle.js';
import { percentile } from '../support/stats.js';

const GOAL_MS = 300;
const repeats = Number(process.env.BENCH_REPEATS ?? 5);
const only = process.env.BENCH_ONLY?.split(',');
const functions = FUNCTIONS.filter((f) => !only || only.includes(f.name));
const outDir = join(REPO_ROOT, '.bench-bundles');
const median = (xs: number[]) => percentile(xs, 50);
const best = (xs: number[]) => Math.min(...xs);
const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');

/** What a child prints: the import's wall and CPU time, and the process's CPU time since it started (ms). */
interface ChildTimes {
  importMs: number;
  importCpuMs: number;
  processCpuMs: number;
}
const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;
/** The child's script: the bare baseline imports nothing and prints the same figures. */
const childScript = (href: string | undefined) =>
  `const cpu=(u)=>(u.user+u.system)/1000; const c0=process.cpuUsage(); const t0=performance.now();` +
  (href ? ` await import(${JSON.stringify(href)});` : '') +
  ` console.log(JSON.stringify({importMs: performance.now()-t0, importCpuMs: cpu(process.cpuUsage(c0)), processCpuMs: cpu(process.cpuUsage())}))`;

function timeProcess(args: string[]): { wallMs: number; child: ChildTimes } {
  const t0 = performance.now();
  const out = execFileSync(process.execPath, args, { cwd: REPO_ROOT, encoding: 'utf8', env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' } });
  return { wallMs: performance.now() - t0, child: JSON.parse(out.trim().split('\n').at(-1)!) as ChildTimes };
}

interface Row {
  name: string;
  kb: number;
  evaluatedKb: number;
  largest: string;
  importMs: number;
  importCpuMs: number;
  processCpuMs: number;
  bareCpuMs: number;
  wallMs: number;
  bareWallMs: number;
}

rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });
console.log(`bench:imports  ${functions.length} bundles x ${repeats}, load average at start ${load()}, ${cpuMs(process.cpuUsage()).toFixed(0)} ms CPU in this process so far`);
const rows: Row[] = [];
for (const f of functions) {
  const file = join(outDir, `${f.name}.mjs`);
  const { metafile } = await build({
    entryPoints: [join(REPO_ROOT, f.entry)],
    outfile: file,
    bundle: true,
    metafile: true,
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
  const evaluated = evaluatedAtImport(metafile, f.entry);
  const script = childScript(pathToFileURL(file).href);
  const bare = childScript(undefined);
  const runs: { wallMs: number; child: ChildTimes }[] = [];
  const bareWalls: number[] = [];
  const bareCpus: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    execFileSync(process.execPath, ['-e', ''], { cwd: REPO_ROOT });
    bareWalls.push(performance.now() - t0);
    bareCpus.push(timeProcess(['--input-type=module', '-e', bare]).child.processCpuMs);
    runs.push(timeProcess(['--input-type=module', '-e', script]));
  }
  rows.push({
    name: f.name,
    kb: Math.round(statSync(file).size / 1024),
    evaluatedKb: Math.round(evaluated.bytes / 1024),
    largest: largestByPackage(evaluated.inputs, 4)
      .map(([p, b]) => `${p} ${Math.round(b / 1024)}`)
      .join(', '),
    importMs: median(runs.map((r) => r.child.importMs)),
    importCpuMs: best(runs.map((r) => r.child.importCpuMs)),
    processCpuMs: best(runs.map((r) => r.child.processCpuMs)),
    bareCpuMs: best(bareCpus),
    wallMs: median(runs.map((r) => r.wallMs)),
    bareWallMs: median(bareWalls),
  });
}
rmSync(outDir, { recursive: true, force: true });

const ok = (ms: number) => (ms <= GOAL_MS ? 'ok' : 'OVER');
console.log('| function | bundle KB | evaluated at import KB | import CPU ms (best) | process CPU ms (best) / bare node | import wall ms (median) | process wall ms / bare `node -e \'\'` (median) | goal <= 300 ms: CPU, wall |');
console.log('|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(
    `| ${r.name} | ${r.kb} | ${r.evaluatedKb} | ${r.importCpuMs.toFixed(0)} | ${r.processCpuMs.toFixed(0)} / ${r.bareCpuMs.toFixed(0)} | ${r.importMs.toFixed(0)} | ${r.wallMs.toFixed(0)} / ${r.bareWallMs.toFixed(0)} | ${ok(r.importCpuMs)}, ${ok(r.importMs)} |`,
  );
}
console.log('\nlargest inputs evaluated at import (KB, by package or folder):');
for (const r of rows) console.log(`  ${r.name}: ${r.largest}`);
const over = (pick: (r: Row) => number) => rows.filter((r) => pick(r) > GOAL_MS).map((r) => r.name).join(', ') || 'none';
console.log(`over ${GOAL_MS} ms by CPU: ${over((r) => r.importCpuMs)}; by wall: ${over((r) => r.importMs)}; load average at end ${load()}`);

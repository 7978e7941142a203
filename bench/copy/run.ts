/**
 * bench/copy: Ferry's copy worker (copy + byte-for-byte verification of every file) against `cp -a` and
 * against upstream manila's method (`cp -P --preserve=all`, then `sha256sum` of every source and
 * destination file), on the same generated tree in the same run.
 *
 *   npm run bench:copy            (BENCH_COPY_MB=1024 tree size, BENCH_COPY_REPS=5 timed runs each;
 *                                  BENCH_COPY_THREADS, BENCH_COPY_CHUNK_KB to try other settings;
 *                                  BENCH_COPY_BUSY=1: another process keeps one core busy meanwhile;
 *                                  TMPDIR=/dev/shm: on tmpfs, without ext4's inode allocation cost)
 *
 * The tree: about 80% of the bytes in 4 large files, the rest in small files (1 KiB - 128 KiB) over
 * many directories, plus symlinks and a hard link. Content is deterministic (AES-CTR of zeros under
 * a fixed key), and incompressible.
 *
 * The page cache cannot be dropped without root tricks, so every method runs once untimed to warm
 * it the same way, then the methods are interleaved (order rotated each repetition) and the
 * median of each is reported. `sync` runs before each timed run so no method pays for another's
 * writeback. Upstream is given the benefit of one `cp -r` and batched `sha256sum` (it really runs
 * one `cp` and two `sha256sum` processes per file).
 *
 * The machine is shared (other test runs), so besides the medians of wall time it prints:
 * - the paired ratios: in each repetition Ferry against the cp -a / upstream run next to it, and
 *   the median of those (a burst of load hits neighbours in time alike);
 * - CPU seconds (user + sys) of each method: Ferry's from process.cpuUsage (all its threads), the
 *   others' from the children's times in /proc/self/stat. CPU time barely moves with load, and
 *   says what a method costs where wall time says what it got.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createCipheriv } from 'node:crypto';
import { closeSync, linkSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync, writeSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_CHUNK_BYTES } from '../../functions/copy/file-copy.js';
import { defaultThreadCount } from '../../functions/copy/thread-pool.js';
import { copyTree } from '../../functions/copy/worker.js';

const TOTAL_MB = Number(process.env.BENCH_COPY_MB ?? 1024);
const REPS = Number(process.env.BENCH_COPY_REPS ?? 5);
/** Ferry's knobs, to compare settings: copy threads and chunk size (KiB); the worker's defaults otherwise. */
const THREADS = process.env.BENCH_COPY_THREADS ? Number(process.env.BENCH_COPY_THREADS) : undefined;
const CHUNK_KB = process.env.BENCH_COPY_CHUNK_KB ? Number(process.env.BENCH_COPY_CHUNK_KB) : undefined;
const BUSY = process.env.BENCH_COPY_BUSY === '1';
const LARGE_FILES = 4;
const LARGE_SHARE = 0.8;
const SMALL_FILES_PER_DIR = 100;
const MiB = 1024 * 1024;

/** Deterministic, incompressible bytes: AES-128-CTR keystream under a fixed key. */
function keystream(seed: number) {
  const iv = Buffer.alloc(16);
  iv.writeUInt32BE(seed, 0);
  const cipher = createCipheriv('aes-128-ctr', Buffer.from('ferry-bench-copy'), iv);
  const zeros = Buffer.alloc(MiB);
  return (bytes: number): Buffer => (bytes <= MiB ? cipher.update(zeros.subarray(0, bytes)) : cipher.update(Buffer.alloc(bytes)));
}

function writeFile(path: string, bytes: number, seed: number): void {
  const next = keystream(seed);
  const fd = openSync(path, 'w', 0o644);
  for (let done = 0; done < bytes; ) {
    const n = Math.min(MiB, bytes - done);
    writeSync(fd, next(n));
    done += n;
  }
  closeSync(fd);
}

function generateTree(root: string): { bytes: number; files: number } {
  mkdirSync(root);
  const totalBytes = TOTAL_MB * MiB;
  const largeBytes = Math.floor((totalBytes * LARGE_SHARE) / LARGE_FILES);
  let bytes = 0;
  let files = 0;
  mkdirSync(join(root, 'large'));
  for (let i = 0; i < LARGE_FILES; i++) {
    writeFile(join(root, 'large', `blob-${i}.bin`), largeBytes, 1000 + i);
    bytes += largeBytes;
    files++;
  }
  // Small files: sizes cycle deterministically between 1 KiB and 128 KiB (about 64 KiB on average).
  let dir = -1;
  for (let i = 0; bytes < totalBytes; i++) {
    if (i % SMALL_FILES_PER_DIR === 0) mkdirSync(join(root, `dir-${++dir}`, 'sub'), { recursive: true });
    const size = Math.min(totalBytes - bytes, 1024 + ((i * 7919) % (127 * 1024)));
    writeFile(join(root, `dir-${dir}`, i % 3 === 0 ? 'sub' : '', `file-${i}.dat`), size, i);
    bytes += size;
    files++;
  }
  symlinkSync('../large/blob-0.bin', join(root, 'dir-0', 'link-to-blob'));
  symlinkSync('missing-target', join(root, 'dir-0', 'dangling'));
  linkSync(join(root, 'dir-0', 'sub', 'file-0.dat'), join(root, 'dir-0', 'hard-link.dat'));
  return { bytes, files };
}

function run(command: string, args: string[]): string {
  const out = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 256 * MiB });
  if (out.status !== 0) throw new Error(`${command} ${args.join(' ')} failed: ${out.stderr}`);
  return out.stdout;
}

/** `sha256sum` over every regular file under root, in batches (as xargs would), keyed by relative path. */
function sha256sumTree(root: string): Map<string, string> {
  const list = run('find', [root, '-type', 'f', '-print0']).split('\0').filter(Boolean);
  const sums = new Map<string, string>();
  for (let i = 0; i < list.length; i += 500) {
    for (const line of run('sha256sum', list.slice(i, i + 500)).split('\n')) {
      if (!line) continue;
      const [hash, path] = [line.slice(0, 64), line.slice(66)];
      sums.set(path.slice(root.length), hash);
    }
  }
  return sums;
}

type Method = { name: string; run: (src: string, dst: string) => Promise<void> };

const methods: Method[] = [
  {
    name: 'ferry (copy + verify)',
    run: async (src, dst) => {
      const result = await copyTree({
        source: src,
        destination: dst,
        operationId: 'bench',
        ...(THREADS ? { threads: THREADS } : {}),
        ...(CHUNK_KB ? { chunkBytes: CHUNK_KB * 1024 } : {}),
      });
      if (result.status !== 'completed') throw new Error(`ferry copy ${result.status}: ${result.error?.message}`);
    },
  },
  { name: 'cp -a', run: async (src, dst) => void run('cp', ['-a', src, dst]) },
  {
    name: 'upstream (cp -P --preserve=all + sha256sum both)',
    run: async (src, dst) => {
      run('cp', ['-P', '--preserve=all', '-r', src, dst]);
      const before = sha256sumTree(src);
      const after = sha256sumTree(dst);
      for (const [path, hash] of before) if (after.get(path) !== hash) throw new Error(`upstream: ${path} differs`);
    },
  },
];

/**
 * CPU seconds used by this process's threads plus its waited-for children, in user space and in
 * the kernel apart: on this machine's ext4 most of every method's kernel time is inode allocation
 * (docs/copy-worker.md, "Where the CPU goes"), which swings by run and says nothing of the method.
 */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
type Cpu = { user: number; sys: number };
function cpuSeconds(): Cpu {
  const own = process.cpuUsage();
  // /proc/self/stat: the fields after the ')' that ends the command name; cutime, cstime are 16, 17.
  const fields = readFileSync('/proc/self/stat', 'utf8').split(')').pop()!.trim().split(/\s+/);
  return { user: own.user / 1e6 + Number(fields[13]) / CLOCK_TICKS, sys: own.system / 1e6 + Number(fields[14]) / CLOCK_TICKS };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'ferry-bench-copy-'));
  try {
    const src = join(work, 'src');
    console.log(`bench/copy: generating ${TOTAL_MB} MiB tree in ${work} ...`);
    const tree = generateTree(src);
    console.log(`  ${tree.files} files, ${(tree.bytes / MiB).toFixed(0)} MiB; ferry uses ${THREADS ?? defaultThreadCount()} copy threads, ${CHUNK_KB ?? DEFAULT_CHUNK_BYTES / 1024} KiB chunks`);
    const dst = join(work, 'dst');
    const once = async (m: Method): Promise<{ wall: number; cpu: Cpu }> => {
      rmSync(dst, { recursive: true, force: true });
      spawnSync('sync');
      const c0 = cpuSeconds();
      const t0 = performance.now();
      await m.run(src, dst);
      const wall = (performance.now() - t0) / 1000;
      const c1 = cpuSeconds();
      return { wall, cpu: { user: c1.user - c0.user, sys: c1.sys - c0.sys } };
    };
    const measure = async (): Promise<void> => {
      for (const m of methods) await once(m); // warm-up, untimed
      const seconds = new Map<string, number[]>(methods.map((m) => [m.name, []]));
      const cpu = new Map<string, Cpu[]>(methods.map((m) => [m.name, []]));
      for (let rep = 0; rep < REPS; rep++) {
        for (let k = 0; k < methods.length; k++) {
          const m = methods[(rep + k) % methods.length]!;
          const r = await once(m);
          seconds.get(m.name)!.push(r.wall);
          cpu.get(m.name)!.push(r.cpu);
        }
      }
      const mbps = new Map<string, number>();
      const total = (name: string) => median(cpu.get(name)!.map((c) => c.user + c.sys));
      const part = (name: string, key: keyof Cpu) => median(cpu.get(name)!.map((c) => c[key]));
      console.log(`\n  method                                              median s   MiB/s   CPU s  (user / sys)   (wall s of each run)`);
      for (const m of methods) {
        const s = median(seconds.get(m.name)!);
        mbps.set(m.name, tree.bytes / MiB / s);
        console.log(
          `  ${m.name.padEnd(50)} ${s.toFixed(2).padStart(8)} ${mbps.get(m.name)!.toFixed(0).padStart(7)} ${total(m.name).toFixed(2).padStart(7)}  (${part(m.name, 'user').toFixed(2)} / ${part(m.name, 'sys').toFixed(2)})   (${seconds.get(m.name)!.map((x) => x.toFixed(2)).join(', ')})`,
        );
      }
      const [ferry, cpa, upstream] = methods.map((m) => mbps.get(m.name)!);
      const [ferryS, cpaS, upstreamS] = methods.map((m) => seconds.get(m.name)!);
      const paired = (other: number[]) => median(other.map((s, rep) => s / ferryS![rep]!));
      const pairedText = (other: number[]) => other.map((s, rep) => (s / ferryS![rep]!).toFixed(2)).join(', ');
      console.log(`\n  ferry / cp -a     = ${(ferry! / cpa!).toFixed(2)}x of medians, ${paired(cpaS!).toFixed(2)}x median of paired (${pairedText(cpaS!)})   (goal >= 0.9x)`);
      console.log(`  ferry / upstream  = ${(ferry! / upstream!).toFixed(2)}x of medians, ${paired(upstreamS!).toFixed(2)}x median of paired (${pairedText(upstreamS!)})   (goal >= 2x)`);
      const [ferryCpu, cpaCpu] = methods.map((m) => total(m.name));
      console.log(`  CPU s ferry / cp -a = ${(ferryCpu! / cpaCpu!).toFixed(2)}x   (goal <= 1.5x)`);
      console.log(`  load average at end: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    };
    console.log(`  load average at start: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    // A busy host: one core taken by a spinning process for the whole measurement.
    const busy = BUSY ? spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }) : undefined;
    if (busy) console.log(`  one core kept busy by pid ${busy.pid}`);
    try {
      await measure();
    } finally {
      busy?.kill('SIGKILL');
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

await main();

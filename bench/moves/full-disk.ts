/**
 * bench/moves/full-disk.ts: issue 17's "a fully written disk moves at the machine's file copy
 * speed (against `cp --sparse=always` of the same file in the same run: at least 0.8x)".
 *
 * A server's root disk (and, for the swap, an attached volume) is filled completely with random
 * bytes (nothing is a hole, nothing is zeros), then in BENCH_REPEATS interleaved rounds (flows in
 * rotated order; within a flow the cp and Ferry halves alternate which goes first) it times each
 * move that copies the whole file:
 * - cold migration (the driver's migrateDiskAndPowerOff: a sparse copy to the destination);
 * - live migration (the driver's liveMigration: pre-copy, then the stop-and-copy), twice: `live`, of a
 *   disk left alone since it was last written or moved (the bench waits until its ctime is SETTLED_MS
 *   old, as a guest's idle disk is: the stop-and-copy is skipped by the times, docs/compute-driver.md),
 *   the goal's figure; and `live-moved`, right after an untimed live migration of the same server
 *   (its rename set the disk's ctime less than SETTLED_MS before, so the stop-and-copy compares both
 *   disks whole, as the proof requires): a labelled line of its own, so neither case hides the other;
 * - swap of a fully written volume (the swap step's block copy, between the driver's
 *   openGuestDevice and its detachVolume right after the copy);
 * - shelve + offload (the driver's snapshot: `qemu-img convert` to qcow2; the flow then uploads it).
 * For each: the driver's copy (measured around the driver call, in this process, which runs the
 * whole stack) and the whole move's wall time (API call until the server settles), against
 * `cp --sparse=always` of the same file into the same directory (the same file system) in the
 * same round, and against cp + `sync -f` of its copy (the same copy made durable, as Ferry's are: the
 * second baseline). Each move's fsyncs and fdatasyncs (the stack's FileHandle syncs) are counted and
 * timed, to show how much of it waits on the disk. Evacuation copies with the same sparseCopy as cold migration and is not repeated;
 * cross-cell resize is the shelve snapshot plus an upload and a spawn (bench:moves has it).
 *
 * Page cache: not dropped (that would hit every other process on a shared machine). Before each
 * timed half the file about to be copied is read once whole (warm, as it is for cp and Ferry
 * alike), then `sync` runs so no half pays for another's writeback.
 *
 *   npm run bench:moves:full    (BENCH_DISK_MIB=1024: the bytes written, the whole 1 GiB disk of
 *                                flavor m1.small; BENCH_REPEATS=3; BENCH_FLOWS=cold,live,swap,shelve,
 *                                where `live` is both live lines, `live-moved` alone the second)
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { open, stat } from 'node:fs/promises';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalComputeDriver, localCopyStats, resetLocalCopyStats } from '../../functions/drivers/compute/local.js';
import { SETTLED_MS } from '../../functions/drivers/compute/local/files.js';
import { CONNECTIONS_DIR, DISK_FILE, GUESTS_DIR, type ConnectionEntry, type GuestState } from '../../functions/drivers/compute/local/layout.js';
import { driverOfHost } from '../../functions/servers/engine.js';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { findCopies } from '../../functions/servers/repo.js';
import { startLocalStack } from '../../infra/local/stack.js';
import { runBench } from '../support/run-bench.js';

const MiB = 1 << 20;
const DISK_MIB = Number(process.env.BENCH_DISK_MIB ?? 1024);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
/** `live` is both live lines: the disk left alone (the goal's figure), then the one moved just before. */
const FLOWS = (process.env.BENCH_FLOWS ?? 'cold,live,swap,shelve')
  .split(',')
  .filter(Boolean)
  .flatMap((f) => (f === 'live' ? ['live', 'live-moved'] : [f]));
/** m1.small: a 1 GiB root disk; the swap's volumes are 1 GiB too. */
const FLAVOR = '1';

/** CPU seconds (user + sys) of this process's threads plus its waited-for children (qemu-img, cp). */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
function cpuSeconds(): number {
  const own = process.cpuUsage();
  const fields = readFileSync('/proc/self/stat', 'utf8').split(')').pop()!.trim().split(/\s+/);
  return (own.user + own.system) / 1e6 + (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/**
 * Fills `path` from offset 0 with `bytes` random bytes (no chunk of zeros: nothing can stay a hole), fsynced.
 * Asynchronous, as warm() is: the stack runs in this process, and an event loop blocked longer than
 * its keep-alive timeout (5 s; a GiB's fill at load 15) had the server close the idle pooled
 * connection just as the next request went out on it (ECONNRESET at the next boot).
 */
async function fillRandom(path: string, bytes: number): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    const buf = Buffer.alloc(4 * MiB);
    for (let pos = 0; pos < bytes; pos += buf.length) {
      const n = Math.min(buf.length, bytes - pos);
      randomFillSync(buf, 0, n);
      for (let done = 0; done < n; ) done += (await fh.write(buf, done, n - done, pos + done)).bytesWritten;
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Reads the file whole (into the page cache), then syncs every file system: the same start for each half. */
async function warm(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(4 * MiB);
    while ((await fh.read(buf, 0, buf.length, null)).bytesRead > 0);
  } finally {
    await fh.close();
  }
  await new Promise<void>((resolve, reject) => spawn('sync').on('error', reject).on('close', () => resolve()));
}

/**
 * `cp --sparse=always` of `path` to a new file beside it (same file system), timed; then `sync -f`
 * of the copy, timed apart: cp alone (`ms`) is the issue's baseline, cp + sync (`ms + syncMs`) the
 * same copy made durable, as Ferry's are. The copy is removed after.
 */
function timeCp(path: string): { ms: number; cpu: number; syncMs: number } {
  const copy = `${path}.bench-cp`;
  rmSync(copy, { force: true });
  const c0 = cpuSeconds();
  const t0 = performance.now();
  const out = spawnSync('cp', ['--sparse=always', path, copy]);
  const ms = performance.now() - t0;
  const cpu = cpuSeconds() - c0;
  if (out.status !== 0) throw new Error(`cp failed: ${String(out.stderr)}`);
  const t1 = performance.now();
  const synced = spawnSync('sync', ['-f', copy]);
  const syncMs = performance.now() - t1;
  if (synced.status !== 0) throw new Error(`sync -f failed: ${String(synced.stderr)}`);
  rmSync(copy, { force: true });
  return { ms, cpu, syncMs };
}

/**
 * Time spent in fsync/fdatasync by this process (the whole stack) while a flow runs: every
 * FileHandle's sync and datasync, counted and timed (they run on libuv's pool, so a sync that
 * overlaps other work is counted whole: the sum says where the flow waited, not an exclusive share).
 */
const syncs = { count: 0, ms: 0 };
async function instrumentSyncs(): Promise<void> {
  const fh = await open(process.execPath, 'r');
  const proto = Object.getPrototypeOf(fh) as Record<'sync' | 'datasync', (this: unknown) => Promise<void>>;
  await fh.close();
  for (const name of ['sync', 'datasync'] as const) {
    const fn = proto[name];
    proto[name] = async function (this: unknown) {
      const t0 = performance.now();
      try {
        return await fn.call(this);
      } finally {
        syncs.count++;
        syncs.ms += performance.now() - t0;
      }
    };
  }
}

/**
 * The driver calls whose time is the copy: `[start method, end method]` of the local compute
 * driver; the copy is from the start call's start to the end call's end (or start, for swap).
 */
const COPY_CALLS: Record<string, { from: string; to: string; toEdge: 'start' | 'end' }> = {
  cold: { from: 'migrateDiskAndPowerOff', to: 'migrateDiskAndPowerOff', toEdge: 'end' },
  live: { from: 'liveMigration', to: 'liveMigration', toEdge: 'end' },
  'live-moved': { from: 'liveMigration', to: 'liveMigration', toEdge: 'end' },
  // The swap step: openGuestDevice, openConnection, the block copy, closes, then detachVolume.
  swap: { from: 'openGuestDevice', to: 'detachVolume', toEdge: 'start' },
  shelve: { from: 'snapshot', to: 'snapshot', toEdge: 'end' },
};

/** Driver calls seen while a flow runs: name, start, end (performance.now()), and CPU seconds at each. */
const calls: { name: string; t0: number; t1: number; c0: number; c1: number }[] = [];
function instrumentDriver(): void {
  const proto = LocalComputeDriver.prototype as unknown as Record<string, unknown>;
  for (const name of new Set(Object.values(COPY_CALLS).flatMap((c) => [c.from, c.to]))) {
    const fn = proto[name] as (...a: unknown[]) => Promise<unknown>;
    proto[name] = async function (this: unknown, ...a: unknown[]) {
      const call = { name, t0: performance.now(), t1: 0, c0: cpuSeconds(), c1: 0 };
      calls.push(call);
      try {
        return await fn.apply(this, a);
      } finally {
        call.t1 = performance.now();
        call.c1 = cpuSeconds();
      }
    };
  }
}

/** The driver's copy in the calls of one flow: its time and this process's CPU seconds meanwhile. */
function driverCopy(flow: string): { ms: number; cpu: number } {
  const spec = COPY_CALLS[flow]!;
  const from = calls.find((c) => c.name === spec.from);
  const to = calls.filter((c) => c.name === spec.to).at(-1);
  if (!from || !to) throw new Error(`${flow}: the driver calls ${spec.from} / ${spec.to} were not seen`);
  const end = spec.toEdge === 'end' ? { t: to.t1, c: to.c1 } : { t: to.t0, c: to.c0 };
  return { ms: end.t - from.t0, cpu: end.c - from.c0 };
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'ferry-bench-full-'));
  const stack = await startLocalStack({ dataDir, port: 0, quiet: true });
  await stack.reconciled;
  instrumentDriver();
  await instrumentSyncs();
  const headers = { 'X-Auth-Token': 'admin:admin', 'Content-Type': 'application/json', Accept: 'application/json' };
  async function call(base: string, method: string, path: string, body: unknown, version: string): Promise<any> {
    const res = await fetch(base + path, { method, headers: { ...headers, 'OpenStack-API-Version': version }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 400) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  }
  const nova = (method: string, path: string, body?: unknown) => call(`${stack.url}/compute/v2.1`, method, path, body, 'compute 2.93');
  const cinder = (method: string, path: string, body?: unknown) => call(`${stack.url}/volume/v3/admin`, method, path, body, 'volume 3.70');
  const action = (id: string, body: unknown) => nova('POST', `/servers/${id}/action`, body);
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  /** Until no operation is in flight on the server; its instance record then. */
  async function settle(id: string, expectVm?: string): Promise<Record<string, any>> {
    for (let i = 0; ; i++) {
      const copies = await findCopies(id);
      const found = copies[0];
      if (found && !copies.some((c) => c.instance.operation) && !found.instance.hidden) {
        const s = found.instance as unknown as Record<string, any>;
        if (expectVm && s.vmState !== expectVm) throw new Error(`expected ${expectVm}, got ${String(s.vmState)} ${JSON.stringify(s.fault)}`);
        return s;
      }
      if (i > 10_000) throw new Error(`server ${id} did not settle`);
      // 100 ms: a resolution of 1-3% of these multi-second moves; each poll is 4 DynamoDB requests
      // on this process's event loop, which a faster poll takes from the chunk copies measured.
      await sleep(100);
    }
  }
  async function newVolume(): Promise<string> {
    const id = (await cinder('POST', '/volumes', { volume: { size: Math.ceil(DISK_MIB / 1024), name: 'bench-full' } })).volume.id as string;
    while ((await cinder('GET', `/volumes/${id}`)).volume.status !== 'available') await sleep(20);
    return id;
  }
  async function boot(): Promise<string> {
    const id = (await nova('POST', '/servers', { server: { name: 'bench-full', flavorRef: FLAVOR, networks: 'auto', imageRef: SANDBOX_IMAGES.cirrosTiny.id } })).server.id as string;
    await settle(id, 'active');
    return id;
  }
  /** Where the local driver keeps the server's root disk now. */
  const diskOf = async (id: string): Promise<string> => {
    const driver = (await driverOfHost(String((await settle(id)).host))) as LocalComputeDriver;
    return join(driver.dir, GUESTS_DIR, id, DISK_FILE);
  };
  /** The file behind the volume attached at `device` (the host's connection entry names it). */
  const volumeFileOf = async (id: string, device: string): Promise<string> => {
    const driver = (await driverOfHost(String((await settle(id)).host))) as LocalComputeDriver;
    const state = JSON.parse(readFileSync(join(driver.dir, GUESTS_DIR, id, 'state.json'), 'utf8')) as GuestState;
    const key = state.volumes.find((v) => v.mountpoint === device)!.connectionKey;
    return (JSON.parse(readFileSync(join(driver.dir, CONNECTIONS_DIR, `${key}.json`), 'utf8')) as ConnectionEntry).devicePath;
  };

  if (!(DISK_MIB > 0 && DISK_MIB <= 1024)) throw new Error(`BENCH_DISK_MIB=${DISK_MIB}: at most the 1024 MiB of the m1.small root disk`);
  console.log(`bench/moves/full-disk: ${DISK_MIB} MiB of random bytes, ${REPEATS} rounds of ${FLOWS.join(', ')}; load average at start ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const server = await boot();
  await fillRandom(await diskOf(server), DISK_MIB * MiB);
  // The swap's server: a volume filled whole; each round swaps it onto a new empty volume.
  const swapServer = FLOWS.includes('swap') ? await boot() : undefined;
  let swapVolume = '';
  let swapDevice = '';
  if (swapServer) {
    swapVolume = await newVolume();
    const att = await nova('POST', `/servers/${swapServer}/os-volume_attachments`, { volumeAttachment: { volumeId: swapVolume } });
    swapDevice = att.volumeAttachment.device as string;
    await settle(swapServer, 'active');
    await fillRandom(await volumeFileOf(swapServer, swapDevice), DISK_MIB * MiB);
  }

  /** A server action on the bench's server, until it settles in `vm`. */
  const act = (body: unknown, vm: string) => async () => {
    await action(server, body);
    await settle(server, vm);
  };
  /** The calls, fsyncs and bytes copied counted for one move start from zero. */
  const resetCounters = (): void => void ((calls.length = 0), (syncs.count = 0), (syncs.ms = 0), resetLocalCopyStats());
  /** ms since the file's ctime (its last write, or the rename of its last move). */
  const ageOf = async (path: string): Promise<number> => Date.now() - Number((await stat(path, { bigint: true })).ctimeNs / 1_000_000n);
  const liveMove = act({ 'os-migrateLive': { host: null, block_migration: 'auto' } }, 'active');
  /**
   * Each flow: the file its copy reads, the timed move, and what puts the server back (untimed);
   * `ready` runs untimed right before the move (after the warm-up) and says how the move starts.
   */
  const flows: Record<string, { file: () => Promise<string>; move: () => Promise<unknown>; after: () => Promise<unknown>; ready?: () => Promise<string> }> = {
    cold: {
      file: () => diskOf(server),
      move: act({ migrate: null }, 'resized'),
      after: act({ confirmResize: null }, 'active'),
    },
    live: {
      file: () => diskOf(server),
      // Left alone SETTLED_MS at the API call, so at the pre-copy's mark too: the times prove no write.
      ready: async () => {
        const age = await ageOf(await diskOf(server));
        if (age < SETTLED_MS) await sleep(SETTLED_MS - age + 10);
        return `disk left alone ${Math.max(age, SETTLED_MS)} ms, waited ${Math.max(0, SETTLED_MS - age + 10)} ms`;
      },
      move: liveMove,
      after: async () => {},
    },
    'live-moved': {
      file: () => diskOf(server),
      // Moved just before (untimed), so the disk's ctime is younger than SETTLED_MS: compared whole.
      ready: async () => {
        await liveMove();
        const path = await diskOf(server);
        await warm(path);
        const age = await ageOf(path);
        return `disk moved ${age} ms before${age >= SETTLED_MS ? ` (NOT the compare-whole case: >= ${SETTLED_MS} ms)` : ''}`;
      },
      move: liveMove,
      after: async () => {},
    },
    swap: {
      file: () => volumeFileOf(swapServer!, swapDevice),
      move: async () => {
        const next = await newVolume();
        resetCounters();
        const t0 = performance.now();
        await nova('PUT', `/servers/${swapServer}/os-volume_attachments/${swapVolume}`, { volumeAttachment: { volumeId: next } });
        await settle(swapServer!, 'active');
        const old = swapVolume;
        swapVolume = next;
        return { old, t0 };
      },
      after: async () => {},
    },
    shelve: {
      file: () => diskOf(server),
      move: act({ shelve: null }, 'shelved_offloaded'),
      after: act({ unshelve: null }, 'active'),
    },
  };

  type Row = { readMiB: number; note: string; round: number; flow: string; cpMs: number; cpCpu: number; cpSyncMs: number; copyMs: number; copyCpu: number; syncMs: number; syncCount: number; moveMs: number; first: string };
  const rows: Row[] = [];
  for (let round = 0; round < REPEATS; round++) {
    const order = FLOWS.map((_, k) => FLOWS[(round + k) % FLOWS.length]!);
    for (const [k, flow] of order.entries()) {
      const f = flows[flow];
      if (!f) throw new Error(`unknown flow ${flow} (cold, live, live-moved, swap, shelve)`);
      const cpFirst = (round + k) % 2 === 0;
      const runCp = async () => {
        const path = await f.file();
        await warm(path);
        return timeCp(path);
      };
      const runMove = async () => {
        await warm(await f.file());
        const note = (await f.ready?.()) ?? '';
        resetCounters();
        const t0 = performance.now();
        const result = (await f.move()) as { old: string; t0: number } | undefined;
        const moveMs = performance.now() - (result?.t0 ?? t0);
        const copy = driverCopy(flow);
        const synced = { ...syncs, readMiB: localCopyStats().readBytes / MiB };
        // Until the old GiB is gone: its unlink (a discard, on a disk mounted so) is not the next flow's.
        if (result?.old) await cinder('DELETE', `/volumes/${result.old}`);
        while (result?.old && (await fetch(`${stack.url}/volume/v3/admin/volumes/${result.old}`, { headers: { ...headers, 'OpenStack-API-Version': 'volume 3.70' } })).status !== 404) await sleep(20);
        await f.after();
        return { moveMs, copy, synced, note };
      };
      const cp = cpFirst ? await runCp() : undefined;
      const ferry = await runMove();
      const cpAfter = cp ?? (await runCp());
      rows.push({ readMiB: ferry.synced.readMiB, note: ferry.note, round, flow, cpMs: cpAfter.ms, cpCpu: cpAfter.cpu, cpSyncMs: cpAfter.ms + cpAfter.syncMs, copyMs: ferry.copy.ms, copyCpu: ferry.copy.cpu, syncMs: ferry.synced.ms, syncCount: ferry.synced.count, moveMs: ferry.moveMs, first: cpFirst ? 'cp' : 'ferry' });
      const r = rows.at(-1)!;
      console.log(
        `  round ${round + 1} ${flow.padEnd(10)} (${r.first} first${r.note ? `; ${r.note}` : ''}): cp ${r.cpMs.toFixed(0)} ms (${r.cpCpu.toFixed(2)} CPU s); driver copy ${r.copyMs.toFixed(0)} ms (${r.copyCpu.toFixed(2)} CPU s), cp/copy ${(r.cpMs / r.copyMs).toFixed(2)}x; cp+sync ${r.cpSyncMs.toFixed(0)} ms, (cp+sync)/copy ${(r.cpSyncMs / r.copyMs).toFixed(2)}x; the move's ${r.syncCount} fsyncs ${r.syncMs.toFixed(0)} ms, its copies read ${r.readMiB.toFixed(0)} MiB; whole move ${r.moveMs.toFixed(0)} ms, cp/move ${(r.cpMs / r.moveMs).toFixed(2)}x; load ${loadavg()[0]!.toFixed(1)}`,
      );
    }
  }

  console.log(`\n  flow         cp ms   cp CPU s   driver copy ms   copy CPU s   cp/copy (median of paired; each)          move ms   cp/move (median of paired)   goal cp/copy >= 0.8x`);
  for (const flow of FLOWS) {
    const mine = rows.filter((r) => r.flow === flow);
    const paired = (f: (r: Row) => number) => mine.map((r) => r.cpMs / f(r));
    console.log(
      `  ${flow.padEnd(10)} ${median(mine.map((r) => r.cpMs)).toFixed(0).padStart(7)} ${median(mine.map((r) => r.cpCpu)).toFixed(2).padStart(10)} ${median(mine.map((r) => r.copyMs)).toFixed(0).padStart(16)} ${median(mine.map((r) => r.copyCpu)).toFixed(2).padStart(12)}   ${median(paired((r) => r.copyMs)).toFixed(2).padStart(5)}x (${paired((r) => r.copyMs).map((x) => x.toFixed(2)).join(', ')})`.padEnd(114) +
        `${median(mine.map((r) => r.moveMs)).toFixed(0).padStart(8)}   ${median(paired((r) => r.moveMs)).toFixed(2)}x (${paired((r) => r.moveMs).map((x) => x.toFixed(2)).join(', ')})`,
    );
  }
  if (FLOWS.includes('live') || FLOWS.includes('live-moved')) {
    console.log(`  live: a disk left alone ${SETTLED_MS} ms before the move (the stop-and-copy skipped by the times): the goal's figure.`);
    console.log(`  live-moved: the same server moved just before (its disk's ctime younger than ${SETTLED_MS} ms): the stop-and-copy compares both disks whole.`);
  }
  console.log(`\n  flow        cp+sync ms   (cp+sync)/copy (median of paired; each)   move's fsyncs: count, ms (median)`);
  for (const flow of FLOWS) {
    const mine = rows.filter((r) => r.flow === flow);
    const paired = mine.map((r) => r.cpSyncMs / r.copyMs);
    console.log(
      `  ${flow.padEnd(10)} ${median(mine.map((r) => r.cpSyncMs)).toFixed(0).padStart(11)}   ${median(paired).toFixed(2).padStart(5)}x (${paired.map((x) => x.toFixed(2)).join(', ')})`.padEnd(70) +
        `${median(mine.map((r) => r.syncCount)).toFixed(0).padStart(5)}, ${median(mine.map((r) => r.syncMs)).toFixed(0)}`,
    );
  }
  console.log(`  load average at end: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  await stack.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

runBench(main);

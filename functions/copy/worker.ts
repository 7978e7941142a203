/**
 * The copy engine: copies a share's tree from `source` to `destination` with metadata, verifies
 * every file byte for byte against the source, reports progress, stops on cancel within a file, and resumes from its
 * journal after a crash.
 *
 * Called in-process by tests and the benchmark (`copyTree`, with any ProgressSink), and by
 * `runCopyOperation` (main.ts, the Fargate task / child process), which ties it to the operation
 * record in DynamoDB.
 *
 * Shape of a run:
 *   1. walk the source once (tree.ts) for totals, hard links and notes;
 *   2. create directories, recreate symlinks;
 *   3. copy files in a small pool of threads (thread.ts, file-copy.ts): largest first, small files
 *      in batches, each file read once, written, read back and compared;
 *   4. link the other names of hard-linked files;
 *   5. set directory owner/mode/times, deepest first, so later writes cannot disturb them;
 *   6. remove the journal.
 * A timer reports progress every `progressIntervalMs` (one write in flight at most) and learns of a
 * cancel from the same write; copy threads poll a shared flag after every chunk.
 */
import { mkdirSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { logger } from '../core/logger.js';
import { CopyFailed, CopyLeaseLost } from './errors.js';
import { fileFaultPoint } from './faults.js';
import { DEFAULT_CHUNK_BYTES, type FileCopied, type FileTask } from './file-copy.js';
import { Journal, journalName, type JournalEntry } from './journal.js';
import type { CopyProgress, ProgressSink } from './progress.js';
import { CopyThreads, defaultThreadCount } from './thread-pool.js';
import { applyDirectoryMetadata, createDirectories, createHardLinks, createSymlinks, finishedEarlier, OwnerPolicy } from './tree-write.js';
import { nsToSeconds, planCopy, type CopyPlan, type PlannedFile, type SkippedEntry } from './tree.js';

/** A few progress writes a second at most; also how often a cancel is noticed. */
export const DEFAULT_PROGRESS_INTERVAL_MS = 500;
/** Small files travel to a copy thread in batches of up to this many files... */
export const BATCH_MAX_FILES = 32;
/** ...or this many bytes, so a batch is a few milliseconds of work and cancel stays prompt. */
export const BATCH_MAX_BYTES = 4 * 1024 * 1024;
/** Batches queued per thread: one running, one waiting, so a thread never idles on a message. */
const BATCHES_IN_FLIGHT_PER_THREAD = 2;

export interface CopyTreeOptions {
  source: string;
  destination: string;
  /** Names the journal, so two operations never share one. */
  operationId: string;
  /** Where progress goes; none = progress is only returned at the end. */
  sink?: ProgressSink;
  progressIntervalMs?: number;
  threads?: number;
  chunkBytes?: number;
  /** Limit on the copy rate (all threads together), bytes per second; 0 or absent = none. */
  bytesPerSecond?: number;
  /** Stops the copy like a cancel from the record (in-process callers). */
  signal?: AbortSignal;
  /**
   * Test hooks, by relative path, after a file's first chunk is written: corrupt its destination,
   * truncate its destination, or write to its source (file-copy.ts FileTask.testHook).
   */
  testHooks?: { corruptBeforeVerify?: string[]; truncateBeforeVerify?: string[]; changeSourceDuringCopy?: string[] };
}

export interface CopyTreeResult {
  status: 'completed' | 'cancelled' | 'failed';
  progress: CopyProgress;
  error?: Error;
  skipped: SkippedEntry[];
  /** False when owners could not be set (the worker is not root): files belong to the worker. */
  ownerPreserved: boolean;
}

type StopReason = { kind: 'cancelled' } | { kind: 'failed'; error: Error } | { kind: 'lease-lost'; error: CopyLeaseLost };

/** Largest first, then small files in batches: the big ones start early and the tail is short. */
function makeBatches(tasks: { task: FileTask; size: number }[]): FileTask[][] {
  tasks.sort((a, b) => b.size - a.size);
  const batches: FileTask[][] = [];
  let batch: FileTask[] = [];
  let bytes = 0;
  for (const { task, size } of tasks) {
    if (batch.length > 0 && (batch.length >= BATCH_MAX_FILES || bytes + size > BATCH_MAX_BYTES)) {
      batches.push(batch);
      batch = [];
      bytes = 0;
    }
    batch.push(task);
    bytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

/**
 * Copies the tree. Resolves with the outcome (completed, cancelled, failed); throws CopyLeaseLost
 * when the sink reports that a newer worker owns the operation (nothing more may be written).
 * When it returns, no thread is writing to the destination any more.
 */
export async function copyTree(options: CopyTreeOptions): Promise<CopyTreeResult> {
  const { source, destination, operationId } = options;
  const progressIntervalMs = options.progressIntervalMs ?? DEFAULT_PROGRESS_INTERVAL_MS;
  const hooks = new Map<string, NonNullable<FileTask['testHook']>>([
    ...(options.testHooks?.corruptBeforeVerify ?? []).map((rel) => [rel, 'corrupt'] as const),
    ...(options.testHooks?.truncateBeforeVerify ?? []).map((rel) => [rel, 'truncate'] as const),
    ...(options.testHooks?.changeSourceDuringCopy ?? []).map((rel) => [rel, 'change-source'] as const),
  ]);
  const owner = new OwnerPolicy();

  // The copy threads boot (a Node environment each, tens of milliseconds) while this thread walks
  // the tree; with few files some may stay idle, which costs nothing but their start.
  let threads: CopyThreads | undefined = options.signal?.aborted
    ? undefined
    : new CopyThreads(options.threads ?? defaultThreadCount(), options.chunkBytes ?? DEFAULT_CHUNK_BYTES, options.bytesPerSecond ?? 0);
  let plan: CopyPlan;
  try {
    plan = planCopy(source, [journalName(operationId)]);
  } catch (e) {
    await threads?.close();
    throw e;
  }
  const progress: CopyProgress = { bytesTotal: plan.bytesTotal, filesTotal: plan.filesTotal, bytesDone: 0, filesDone: 0, filesResumed: 0 };
  let stopReason: StopReason | undefined;
  let resolveStopped!: () => void;
  /** Settles when the copy is told to stop: a lane held by a hang fault lets go then. */
  const stopped = new Promise<void>((resolve) => (resolveStopped = resolve));
  const stop = (reason: StopReason) => {
    stopReason ??= reason;
    threads?.requestStop();
    resolveStopped();
  };
  const faultPoint = fileFaultPoint(operationId);
  const onAbort = () => stop({ kind: 'cancelled' });
  if (options.signal?.aborted) onAbort();
  options.signal?.addEventListener('abort', onAbort, { once: true });

  // Progress: the bytes of finished files plus what the threads have done of their current files.
  const indexToFile: PlannedFile[] = plan.files;
  const snapshot = (): CopyProgress => {
    const now: CopyProgress = { ...progress };
    if (threads) {
      let current: PlannedFile | undefined;
      let currentBytes = 0;
      for (let slot = 0; slot < threads.count; slot++) {
        const index = threads.current[slot]!;
        if (index < 0) continue;
        const bytes = threads.progress[slot]!;
        now.bytesDone += bytes;
        const file = indexToFile[index]!;
        if (!current || file.size > current.size) {
          current = file;
          currentBytes = bytes;
        }
      }
      if (current) Object.assign(now, { currentFile: current.rel, currentFileBytes: currentBytes, currentFileSize: current.size });
    }
    now.bytesDone = Math.min(now.bytesDone, now.bytesTotal);
    return now;
  };

  let reportInFlight: Promise<void> | undefined;
  const report = () => {
    if (!options.sink || reportInFlight) return;
    reportInFlight = options.sink
      .report(snapshot())
      .then(
        (answer) => {
          if (answer.cancelRequested) stop({ kind: 'cancelled' });
        },
        (e) => {
          if (e instanceof CopyLeaseLost) stop({ kind: 'lease-lost', error: e });
          // A progress write that fails for another reason is not worth stopping a copy for; the
          // SDK has already retried it, and the next tick tries again.
          else logger.warn('copy progress write failed', { operationId, error: (e as Error)?.message });
        },
      )
      .finally(() => {
        reportInFlight = undefined;
      });
  };
  const timer = setInterval(report, progressIntervalMs);

  let journal: Journal | undefined;
  try {
    mkdirSync(destination, { recursive: true });
    journal = new Journal(destination, operationId);
    report();
    createDirectories(plan, destination);
    createSymlinks(plan, source, destination, owner);

    // Files an earlier run finished are counted, not copied.
    const tasks: { task: FileTask; size: number }[] = [];
    plan.files.forEach((file, index) => {
      if (finishedEarlier(file, journal!.finished.get(file.rel), destination)) {
        progress.bytesDone += file.size;
        progress.filesDone += 1;
        progress.filesResumed += 1;
        return;
      }
      tasks.push({
        size: file.size,
        task: {
          index,
          rel: file.rel,
          src: join(source, file.rel),
          dst: join(destination, file.rel),
          mode: file.mode,
          uid: file.uid,
          gid: file.gid,
          atime: nsToSeconds(file.atimeNs),
          mtime: nsToSeconds(file.mtimeNs),
          size: file.size,
          mtimeNs: String(file.mtimeNs),
          ...(hooks.has(file.rel) ? { testHook: hooks.get(file.rel) } : {}),
        },
      });
    });

    if (tasks.length > 0 && !stopReason && threads) {
      const batches = makeBatches(tasks);
      let next = 0;
      const finished = (copied: FileCopied[]) => {
        const entries: JournalEntry[] = [];
        for (const c of copied) {
          const file = plan.files[c.index]!;
          progress.bytesDone += c.bytes;
          progress.filesDone += 1;
          entries.push({ path: file.rel, size: file.size, mtimeNs: String(file.mtimeNs) });
          if (!c.ownerKept) owner.allowed = false;
        }
        journal!.append(entries);
      };
      const runBatch = async (thread: number, batch: FileTask[]): Promise<void> => {
        const reply = await threads!.run(thread, batch);
        finished(reply.copied);
        for (const w of reply.warnings) logger.warn(w.message, w.context);
        if (reply.outcome === 'failed') {
          const error = new CopyFailed(reply.error.message, { context: reply.error.context });
          error.name = reply.error.name;
          stop({ kind: 'failed', error });
        }
      };
      const feed = async (thread: number): Promise<void> => {
        while (next < batches.length && !stopReason) {
          let batch = batches[next++]!;
          // The fault point, before each file: the files ahead of a faulted one go as a batch, then
          // the fault acts (fail stops the copy naming the file; hang holds this lane until the
          // fault is cleared or the copy stops), then the rest of the batch follows.
          let checkFrom = 0;
          while (batch.length > 0 && !stopReason) {
            let cut = batch.length;
            let fault: Promise<unknown> | undefined;
            for (let i = checkFrom; i < batch.length; i++) {
              fault = faultPoint(batch[i]!.rel);
              if (fault) {
                cut = i;
                break;
              }
            }
            if (cut > 0) await runBatch(thread, batch.slice(0, cut));
            if (!fault) break;
            const rel = batch[cut]!.rel;
            // The fault's rejection becomes a value at once, so it is handled even when the copy
            // stops before anything waits for it.
            const faultFailure = fault.then(
              () => undefined,
              (e: unknown) => ({ error: e }),
            );
            if (stopReason) break;
            const failure = await Promise.race([faultFailure, stopped.then(() => undefined)]);
            if (failure) {
              const e = failure.error;
              stop({ kind: 'failed', error: new CopyFailed(`Cannot copy ${rel}: ${(e as Error)?.message ?? e}`, { cause: e, context: { file: rel } }) });
              break;
            }
            batch = batch.slice(cut);
            checkFrom = 1;
          }
        }
      };
      const lanes: Promise<void>[] = [];
      for (let thread = 0; thread < threads.count; thread++) {
        for (let lane = 0; lane < BATCHES_IN_FLIGHT_PER_THREAD; lane++) lanes.push(feed(thread));
      }
      const settled = await Promise.allSettled(lanes);
      for (const s of settled) if (s.status === 'rejected') stop({ kind: 'failed', error: s.reason as Error });
    }

    if (!stopReason) {
      createHardLinks(plan, destination);
      // Children before parents: setting a directory's times is the last change inside its parent.
      for (const dir of [...plan.directories].reverse()) applyDirectoryMetadata(dir, destination, owner);
      journal.remove();
      journal = undefined;
      // Removing the journal changed the root's mtime; put it back.
      const root = plan.directories[0]!;
      utimesSync(destination, nsToSeconds(root.atimeNs), nsToSeconds(root.mtimeNs));
    }
  } catch (e) {
    stop({ kind: 'failed', error: e instanceof Error ? e : new CopyFailed(String(e), { cause: e }) });
  } finally {
    clearInterval(timer);
    options.signal?.removeEventListener('abort', onAbort);
    await threads?.close();
    threads = undefined;
    journal?.close();
    await reportInFlight;
  }

  const final: CopyProgress = { ...progress };
  const base = { progress: final, skipped: plan.skipped, ownerPreserved: owner.allowed };
  if (!stopReason) return { status: 'completed', ...base };
  if (stopReason.kind === 'lease-lost') throw stopReason.error;
  if (stopReason.kind === 'cancelled') return { status: 'cancelled', ...base };
  return { status: 'failed', error: stopReason.error, ...base };
}


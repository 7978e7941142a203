/**
 * The copy threads of a run (thread.ts runs in each) and the memory they share with the engine:
 * a stop flag the threads poll after every chunk, and per thread the index of the file it copies
 * and the bytes it has done of it (for progress between batches).
 */
import { Worker } from 'node:worker_threads';
import { availableParallelism } from 'node:os';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { CopyFailed } from './errors.js';
import type { FileTask } from './file-copy.js';
import type { BatchReply, BatchRequest, CopyThreadData } from './thread.js';

export function defaultThreadCount(): number {
  return Math.max(2, Math.min(4, availableParallelism()));
}

let threadSource: string | undefined;

/**
 * The code a copy thread runs. Built JavaScript starts thread.js directly. From TypeScript sources
 * (tsx, vitest) the thread module and its imports are bundled once per process with esbuild, which
 * takes tens of milliseconds, where starting tsx inside every thread took half a second.
 */
function startCopyThread(workerData: CopyThreadData): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./thread.js', here), { workerData });
  threadSource ??= bundleThreadSource(here);
  return new Worker(threadSource, { eval: true, workerData });
}

function bundleThreadSource(here: string): string {
  const esbuild = createRequire(here)('esbuild') as typeof import('esbuild');
  const out = esbuild.buildSync({
    entryPoints: [fileURLToPath(new URL('./thread.ts', here))],
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    write: false,
    logLevel: 'silent',
  });
  return out.outputFiles[0]!.text;
}

/** The copy threads and the memory they share with the engine. */
export class CopyThreads {
  readonly stop = new Int32Array(new SharedArrayBuffer(4));
  readonly progress: Float64Array;
  readonly current: Int32Array;
  private readonly workers: Worker[] = [];
  private readonly pending = new Map<number, { resolve: (r: BatchReply) => void; reject: (e: Error) => void; thread: number }>();
  private nextBatch = 1;

  constructor(count: number, chunkBytes: number, bytesPerSecond: number) {
    const progressBuffer = new SharedArrayBuffer(8 * count);
    const currentBuffer = new SharedArrayBuffer(4 * count);
    this.progress = new Float64Array(progressBuffer);
    this.current = new Int32Array(currentBuffer);
    this.current.fill(-1);
    for (let slot = 0; slot < count; slot++) {
      const worker = startCopyThread({
        slot,
        chunkBytes,
        stop: this.stop.buffer as SharedArrayBuffer,
        progress: progressBuffer,
        current: currentBuffer,
        bytesPerSecond: bytesPerSecond / count,
      });
      worker.on('message', (reply: BatchReply) => {
        const waiter = this.pending.get(reply.batch);
        this.pending.delete(reply.batch);
        waiter?.resolve(reply);
      });
      // A thread that dies (cannot load, out of memory) fails every batch it held.
      const failAll = (e: Error) => {
        for (const [batch, waiter] of this.pending) {
          if (waiter.thread !== slot) continue;
          this.pending.delete(batch);
          waiter.reject(new CopyFailed(`Copy thread ${slot} stopped: ${e.message}`, { cause: e }));
        }
      };
      worker.on('error', failAll);
      worker.on('exit', (code) => failAll(new CopyFailed(`exited with code ${code}`)));
      this.workers.push(worker);
    }
  }

  get count(): number {
    return this.workers.length;
  }

  run(thread: number, tasks: FileTask[]): Promise<BatchReply> {
    const batch = this.nextBatch++;
    return new Promise((resolve, reject) => {
      this.pending.set(batch, { resolve, reject, thread });
      this.workers[thread]!.postMessage({ batch, tasks } satisfies BatchRequest);
    });
  }

  requestStop(): void {
    Atomics.store(this.stop, 0, 1);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

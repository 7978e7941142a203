/**
 * A copy thread (worker_threads): takes batches of files from the engine (worker.ts), copies and
 * verifies each with file-copy.ts, and answers with one message per batch. Started only by the
 * engine; never on its own.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { copyFileVerified, CopyInterrupted, type CopyThreadState, type FileCopied, type FileTask } from './file-copy.js';
import { CopyFailed } from './errors.js';

export interface CopyThreadData {
  slot: number;
  chunkBytes: number;
  stop: SharedArrayBuffer;
  progress: SharedArrayBuffer;
  current: SharedArrayBuffer;
  bytesPerSecond: number;
}

export interface BatchRequest {
  batch: number;
  tasks: FileTask[];
}

export type BatchReply =
  | { batch: number; outcome: 'done'; copied: FileCopied[] }
  | { batch: number; outcome: 'interrupted'; copied: FileCopied[] }
  | { batch: number; outcome: 'failed'; copied: FileCopied[]; error: { message: string; name: string; context: Record<string, unknown> } };

const data = workerData as CopyThreadData;
const state: CopyThreadState = {
  data: Buffer.allocUnsafe(data.chunkBytes),
  check: Buffer.allocUnsafe(data.chunkBytes),
  stop: new Int32Array(data.stop),
  progress: new Float64Array(data.progress),
  current: new Int32Array(data.current),
  slot: data.slot,
  chownAllowed: true,
  bytesPerSecond: data.bytesPerSecond,
  throttle: { startedAt: performance.now(), bytes: 0 },
};

parentPort!.on('message', (request: BatchRequest) => {
  const copied: FileCopied[] = [];
  let reply: BatchReply;
  try {
    for (const task of request.tasks) copied.push(copyFileVerified(task, state));
    reply = { batch: request.batch, outcome: 'done', copied };
  } catch (e) {
    if (e instanceof CopyInterrupted) {
      reply = { batch: request.batch, outcome: 'interrupted', copied };
    } else {
      const failure = e instanceof CopyFailed ? e : new CopyFailed(`Copy thread failed: ${(e as Error)?.message ?? e}`);
      reply = { batch: request.batch, outcome: 'failed', copied, error: { message: failure.message, name: failure.name, context: failure.context } };
    }
  }
  parentPort!.postMessage(reply);
});

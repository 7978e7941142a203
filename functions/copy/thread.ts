/**
 * A copy thread (worker_threads): takes batches of files from the engine (worker.ts), copies and
 * verifies each with file-copy.ts, and answers with one message per batch (with the warnings of
 * its files: the thread loads no logger, whose Powertools were 75 of its 84 KB). Started only by
 * the engine; never on its own.
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

/** What a copy said it left behind during the batch; the engine logs it (the thread has no logger). */
export interface CopyWarning {
  message: string;
  context: Record<string, unknown>;
}

export type BatchReply = { batch: number; copied: FileCopied[]; warnings: CopyWarning[] } & (
  | { outcome: 'done' }
  | { outcome: 'interrupted' }
  | { outcome: 'failed'; error: { message: string; name: string; context: Record<string, unknown> } }
);

const data = workerData as CopyThreadData;
let warnings: CopyWarning[] = [];
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
  warn: (message, context) => warnings.push({ message, context }),
};

parentPort!.on('message', (request: BatchRequest) => {
  const copied: FileCopied[] = [];
  warnings = [];
  let reply: BatchReply;
  try {
    for (const task of request.tasks) copied.push(copyFileVerified(task, state));
    reply = { batch: request.batch, outcome: 'done', copied, warnings };
  } catch (e) {
    if (e instanceof CopyInterrupted) {
      reply = { batch: request.batch, outcome: 'interrupted', copied, warnings };
    } else {
      const failure = e instanceof CopyFailed ? e : new CopyFailed(`Copy thread failed: ${(e as Error)?.message ?? e}`);
      reply = { batch: request.batch, outcome: 'failed', copied, warnings, error: { message: failure.message, name: failure.name, context: failure.context } };
    }
  }
  parentPort!.postMessage(reply);
});

/**
 * The copy worker as a process: locally a child process of the stack, on AWS the command of the
 * Fargate task that has both shares mounted. Configured by the environment only, so the two places
 * start it the same way:
 *
 *   FERRY_COPY_OPERATION_ID       the operation record to claim (share table, pk COPY#<id>)
 *   FERRY_COPY_SOURCE             source share directory
 *   FERRY_COPY_DESTINATION        destination share directory (created if missing)
 *   FERRY_COPY_PROGRESS_INTERVAL_MS   optional, default 500
 *   FERRY_COPY_THREADS            optional, default min(4, max(2, cores))
 *   FERRY_COPY_BYTES_PER_SECOND   optional rate limit, default none
 *   FERRY_COPY_EXIT_WITH_PARENT   1 = exit at once when the parent process is gone (local child
 *                                 process only; unset on AWS)
 *   FERRY_FAULTS                  faults to inject (functions/core/faults.ts), e.g. kind 'copy',
 *                                 method 'copy_file'
 *   FERRY_DYNAMODB_ENDPOINT, FERRY_TABLE_SHARE (or FERRY_TABLE_PREFIX), AWS_REGION as everywhere
 *
 * Exit codes: 0 completed (or already completed), 1 failed, 2 bad configuration, 3 cancelled,
 * 4 superseded by a newer worker, 5 parent gone (FERRY_COPY_EXIT_WITH_PARENT). The final state is
 * in the operation record, except after 2, 4 and 5 (after 5 the record stays running; the next
 * worker resumes it).
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { logger } from '../core/logger.js';
import { runCopyOperation } from './operation.js';

export const EXIT_CODES = { completed: 0, failed: 1, badConfiguration: 2, cancelled: 3, superseded: 4, parentGone: 5 } as const;

/** How often FERRY_COPY_EXIT_WITH_PARENT looks for the parent. */
export const PARENT_CHECK_INTERVAL_MS = 200;

/**
 * The parent's pid now. Node's process.ppid is fixed at start, so read the live value from
 * /proc/self/stat (the field after the state); where /proc is missing, undefined.
 */
export function currentParentPid(): number | undefined {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return Number.isInteger(ppid) ? ppid : undefined;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
}

/**
 * Calls `onGone` once when the parent process is gone (this process was re-parented: the pid
 * differs from the one at start, or, without /proc, the parent no longer exists). Checks every
 * PARENT_CHECK_INTERVAL_MS on an unref'd timer. Returns the function that stops watching.
 */
export function watchParent(onGone: () => void, intervalMs = PARENT_CHECK_INTERVAL_MS): () => void {
  const parent = currentParentPid() ?? process.ppid;
  const timer = setInterval(() => {
    const now = currentParentPid();
    let gone: boolean;
    if (now !== undefined) gone = now !== parent;
    else {
      try {
        process.kill(parent, 0);
        gone = false;
      } catch (e) {
        gone = (e as NodeJS.ErrnoException).code === 'ESRCH';
      }
    }
    if (!gone) return;
    clearInterval(timer);
    onGone();
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

const envSchema = z.object({
  FERRY_COPY_OPERATION_ID: z.string().regex(/^[A-Za-z0-9._-]{1,128}$/, 'letters, digits, . _ - (it names the journal file)'),
  FERRY_COPY_SOURCE: z.string().min(1),
  FERRY_COPY_DESTINATION: z.string().min(1),
  FERRY_COPY_PROGRESS_INTERVAL_MS: z.coerce.number().int().positive().optional(),
  FERRY_COPY_THREADS: z.coerce.number().int().positive().max(64).optional(),
  FERRY_COPY_BYTES_PER_SECOND: z.coerce.number().int().nonnegative().optional(),
  FERRY_COPY_EXIT_WITH_PARENT: z.enum(['0', '1', '']).optional(),
});

export async function main(env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    logger.error(`copy worker: bad configuration: ${problems}`);
    return EXIT_CODES.badConfiguration;
  }
  const config = parsed.data;
  // A local child process must not outlive the stack that started it: after a kill -9 of the
  // stack, the restarted stack's new worker resumes the copy, and an orphan still writing into the
  // same destination would race it. Exits without a final write (the record stays running).
  const stopWatching =
    config.FERRY_COPY_EXIT_WITH_PARENT === '1'
      ? watchParent(() => {
          logger.warn('copy worker: parent process gone; exiting', { operationId: config.FERRY_COPY_OPERATION_ID });
          process.exit(EXIT_CODES.parentGone);
        })
      : () => undefined;
  try {
    return await runOperation(config);
  } finally {
    stopWatching();
  }
}

async function runOperation(config: z.infer<typeof envSchema>): Promise<number> {
  const outcome = await runCopyOperation({
    operationId: config.FERRY_COPY_OPERATION_ID,
    source: config.FERRY_COPY_SOURCE,
    destination: config.FERRY_COPY_DESTINATION,
    progressIntervalMs: config.FERRY_COPY_PROGRESS_INTERVAL_MS,
    threads: config.FERRY_COPY_THREADS,
    bytesPerSecond: config.FERRY_COPY_BYTES_PER_SECOND,
  });
  if (outcome.status === 'failed') logger.error('copy failed', { operationId: config.FERRY_COPY_OPERATION_ID, error: outcome.record.error });
  else logger.info(`copy ${outcome.status}`, { operationId: config.FERRY_COPY_OPERATION_ID });
  return EXIT_CODES[outcome.status];
}

// Run only as the entrypoint, so tests can import main() without starting a copy.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    (code) => process.exit(code),
    (e) => {
      logger.error('copy worker crashed', { error: (e as Error)?.stack ?? String(e) });
      process.exit(EXIT_CODES.failed);
    },
  );
}

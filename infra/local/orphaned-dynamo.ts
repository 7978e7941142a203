/**
 * DynamoDB Local left running by a stack that died alone: where the JVM could not be started under
 * a parent-death signal (no setpriv: dynamo-process.ts), a kill -9 of the stack's process (not its
 * process group) leaves its JVM child alive on the data directory's files. The next start holds the
 * directory's lock, so that JVM has no owner: it is stopped before a new one opens the same files
 * (two DynamoDB Locals on one database file corrupt each other's view). Found by its command line
 * (`-dbPath <data dir>/dynamodb`) in /proc; where there is no /proc (macOS) nothing is found.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { processAlive } from './data-dir-lock.js';

/** Pids of the processes whose arguments include `-dbPath <dbPath>`. */
export function dynamoProcessesOn(dbPath: string): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  const pids: number[] = [];
  for (const name of entries) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let args: string[];
    try {
      args = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
    } catch (e) {
      // Gone between the listing and the read, or not ours to read: not a DynamoDB Local of ours.
      if (['ENOENT', 'ESRCH', 'EACCES'].includes((e as NodeJS.ErrnoException).code ?? '')) continue;
      throw e;
    }
    const at = args.indexOf('-dbPath');
    if (at >= 0 && args[at + 1] === dbPath && args.some((a) => a.includes('DynamoDBLocal'))) pids.push(Number(name));
  }
  return pids;
}

/** Stops every DynamoDB Local still running on `dbPath` (SIGTERM, then SIGKILL after `graceMs`); returns their pids. */
export async function stopOrphanedDynamo(dbPath: string, graceMs = 5000): Promise<number[]> {
  const pids = dynamoProcessesOn(dbPath);
  // Loaded only when there is something to say: main.ts runs this before it launches the JVM, and
  // the logger's import (Powertools, ~0.1 s of CPU here) would delay every start's JVM by that much.
  if (pids.length === 0) return pids;
  const { logger } = await import('../../functions/core/logger.js');
  for (const pid of pids) {
    logger.warn('stopping a DynamoDB Local left running on this data directory by a stack that died', { pid, dbPath });
    signal(pid, 'SIGTERM');
  }
  const deadline = Date.now() + graceMs;
  for (const pid of pids) {
    while (processAlive(pid)) {
      if (Date.now() > deadline) signal(pid, 'SIGKILL');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return pids;
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch (e) {
    // Exited by itself meanwhile: what we wanted.
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
  }
}

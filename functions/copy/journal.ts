/**
 * The journal of finished files, so a worker that crashed (kill -9, a Fargate task stopped) resumes
 * without copying them again.
 *
 * It is a file on the destination share, at its top level beside the copied tree
 * (`.ferry-copy-<operationId>.journal`), because the destination is the one place both a local
 * child process and a later Fargate task can see; a DynamoDB item per file would cost a write per
 * small file. One JSON line per finished file is appended with a single write() once the file's
 * content check and metadata are done: after a crash of the process the kernel still holds
 * every completed write, and a torn last line is ignored. The journal is removed when the copy
 * completes.
 *
 * A file is skipped on resume only if both sides still match the entry: the source's size and
 * mtime (the share is read-only during migration, but a changed file must be copied again), and
 * the destination's size and mtime (set from the source only after the content was verified).
 */
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { logger } from '../core/logger.js';

export interface JournalEntry {
  /** Path relative to the share root. */
  path: string;
  size: number;
  /** Source mtime, nanoseconds, as a decimal string. */
  mtimeNs: string;
  /**
   * Digests an older worker recorded (CRC-32, before that SHA-256); read and ignored, since resume
   * never used them: a journal left by an older worker still resumes.
   */
  crc32?: string;
  sha256?: string;
}

export function journalName(operationId: string): string {
  return `.ferry-copy-${operationId}.journal`;
}

export class Journal {
  readonly path: string;
  /** Entries found when the journal was opened: what an earlier run finished. */
  readonly finished: Map<string, JournalEntry>;
  private fd: number;

  constructor(destination: string, operationId: string) {
    this.path = join(destination, journalName(operationId));
    this.finished = new Map();
    let tornTail = false;
    let tornLines = 0;
    if (existsSync(this.path)) {
      const text = readFileSync(this.path, 'utf8');
      tornTail = text.length > 0 && !text.endsWith('\n');
      for (const line of text.split('\n')) {
        if (line === '') continue;
        try {
          const entry = JSON.parse(line) as JournalEntry;
          this.finished.set(entry.path, entry);
        } catch {
          // A line torn by a crash mid-write: that file is simply copied again.
          tornLines += 1;
        }
      }
    }
    if (tornLines > 0) logger.warn('copy journal: lines torn by a crash are ignored; their files are copied again', { journal: this.path, tornLines });
    this.fd = openSync(this.path, 'a');
    // End a torn line so the next entry starts on its own line.
    if (tornTail) writeSync(this.fd, '\n');
  }

  /** Appends entries with one write, so a crash leaves whole lines or one torn last line. */
  append(entries: JournalEntry[]): void {
    if (entries.length === 0) return;
    writeSync(this.fd, entries.map((e) => JSON.stringify(e)).join('\n') + '\n');
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  /** Closes and deletes the journal (the copy completed). */
  remove(): void {
    this.close();
    rmSync(this.path, { force: true });
  }
}

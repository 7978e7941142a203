/**
 * What the copy worker fails with. Each error names the file (relative to the share root) so an
 * operator reading the operation record knows where to look.
 */
import { Conflict, FerryError } from '../core/errors.js';

/** The copy could not finish: an I/O error, a source that vanished, a destination that is full. */
export class CopyFailed extends FerryError {
  constructor(message: string, options?: { cause?: unknown; context?: Record<string, unknown> }) {
    super(500, 'computeFault', message, options);
  }
}

/** The destination does not hold what was read from the source. */
export class CopyVerificationFailed extends CopyFailed {
  constructor(file: string, sourceSha256: string, destinationSha256: string) {
    super(`Data corrupted while copying ${file}: source sha256 ${sourceSha256}, destination sha256 ${destinationSha256}`, {
      context: { file, sourceSha256, destinationSha256 },
    });
  }
}

/** The source file changed since the tree was walked or while it was read: the share was written during its copy. */
export class CopySourceChanged extends CopyFailed {
  constructor(file: string, seen: { plannedSize: number; plannedMtimeNs: string; size: string; mtimeNs: string; bytesRead: number }) {
    super(
      `${file} changed on the source during the copy (when the copy began: ${seen.plannedSize} bytes, mtime ${seen.plannedMtimeNs} ns; after reading ${seen.bytesRead} bytes: ${seen.size} bytes, mtime ${seen.mtimeNs} ns); a share must not be written while it is copied, so the copy stops and the partial file is removed`,
      { context: { file, ...seen } },
    );
  }
}

/**
 * Another worker claimed the operation (a newer generation): this one must stop writing, both to
 * the destination and to the record. Raised by the conditional write that lost; no extra read.
 */
export class CopyLeaseLost extends Conflict {
  constructor(operationId: string, generation: number, current?: number) {
    super(`Copy operation ${operationId} is now run by another worker (generation ${current ?? 'unknown'}, this one ${generation}); this worker stops.`, {
      operationId,
      generation,
      current,
    });
  }
}

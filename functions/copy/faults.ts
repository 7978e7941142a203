/**
 * The copy worker's fault point (functions/core/faults.ts): kind `copy`, method `copy_file`,
 * checked before each file, so tests and drills can fail or hang a copy at a chosen file.
 */
import { hasFaultsOfKind, withFaults } from '../core/faults.js';

/** Fault kind and method of the worker's fault point. */
export const COPY_FAULT_KIND = 'copy';
export const COPY_FAULT_METHOD = 'copy_file';

/**
 * The fault point: `copy_file(rel)` through withFaults, the fault's backend being the operation id.
 * Returns undefined when no fault applies (the common case costs one array scan, no log entry), or
 * the fault's promise: it rejects for `fail` / `fail-after`, never settles for `hang` until the
 * fault is cleared in this process.
 */
export function fileFaultPoint(operationId: string): (rel: string) => Promise<unknown> | undefined {
  const point = withFaults(COPY_FAULT_KIND, operationId, {
    [COPY_FAULT_METHOD](_rel: string): void {
      // The real work happens in a copy thread; this only gives faults a place to act.
    },
  });
  return (rel) => {
    if (!hasFaultsOfKind(COPY_FAULT_KIND)) return undefined;
    const result = point[COPY_FAULT_METHOD](rel) as unknown;
    return result instanceof Promise ? result : undefined;
  };
}

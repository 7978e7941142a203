/** Placeholder: filled in by the cross-cell work (issue 12). */
import type { ServerStepInput } from '../../engine.js';

export const CROSS_CELL_REVERT_STEPS = {} satisfies Record<string, (input: ServerStepInput) => Promise<unknown>>;

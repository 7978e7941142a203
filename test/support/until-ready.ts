/**
 * Calls until it stops answering BackendNotReady, as a state machine's Task retry would (the step
 * runs again after its wait), counting those answers; bounded. For drivers whose backend is an API
 * that answers "later" (aws-efs): its tests and the share driver contract's misbehaving backend.
 */
import { BackendNotReady } from '../../functions/core/errors.js';

export async function untilReady<T>(call: () => Promise<T>, most = 30): Promise<{ value: T; notReady: number }> {
  for (let notReady = 0; notReady < most; notReady++) {
    try {
      return { value: await call(), notReady };
    } catch (e) {
      if (!(e instanceof BackendNotReady)) throw e;
    }
  }
  throw new Error(`still not ready after ${most} calls`);
}

/**
 * A reconcile pass stopped by its signal between two repairs (reconciler.ts): what it did is done,
 * the rest is the next pass's. Its own module so that the local stack's schedule
 * (infra/local/reconcile-loop.ts) can tell it from a failure without loading the reconciler.
 */
export class ReconcileInterrupted extends Error {
  constructor(readonly repairsMade: number) {
    super(`the reconcile pass was stopped after ${repairsMade} repair record(s); the next pass does the rest`);
    this.name = 'ReconcileInterrupted';
  }
}

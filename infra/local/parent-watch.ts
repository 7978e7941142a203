/**
 * Stops the stack when the process that started it dies. Under `npm start` that is npm (the start
 * script execs node, so no shell stands between): npm forwards SIGINT and SIGTERM to us, but a kill -9
 * of npm runs none of its code and sends us nothing. The kernel then gives this process a new
 * parent (init, or a subreaper), which `process.ppid` (asked of the OS at every read) shows; it is
 * polled, as Linux offers a Node process no event for it.
 */
export const PARENT_POLL_MS = 250;

/** Calls `onGone` once when the parent this process had at the call is no longer its parent; returns a stop. */
export function watchParent(onGone: () => void, intervalMs = PARENT_POLL_MS): () => void {
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    onGone();
  }, intervalMs);
  // The stack's servers keep the process alive; this timer alone must not.
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * The names of Ferry's state machines, which the core needs to start executions. The wiring table
 * (functions/wiring.ts) gives each its ASL file and functions, and its test checks that both lists
 * hold the same names; the names live here so that core never imports the wiring above it.
 */
export const STATE_MACHINE_NAMES = [
  'volume-create',
  'volume-delete',
  'volume-failover',
  'volume-attach-wait',
  'snapshot-create',
  'image-import',
  'replication-schedule',
  'replication-pass',
  'share-create',
  'share-delete',
  'share-migration-start',
  'share-migration-complete',
  'share-migration-cancel',
  'server-create',
  'server-delete',
  'server-power',
  'server-attach-volume',
  'server-detach-volume',
  'server-evacuate',
  'server-shelve',
  'server-unshelve',
  'server-swap-volume',
  'server-live-migrate',
  'server-resize',
  'server-confirm-resize',
  'server-revert-resize',
  'server-cross-cell-confirm',
  'server-cross-cell-revert',
] as const;

export type StateMachineName = (typeof STATE_MACHINE_NAMES)[number];

/** `volume-create` -> `FERRY_SM_VOLUME_CREATE`: the environment variable holding a machine's ARN. */
export function stateMachineEnvName(name: string): string {
  return 'FERRY_SM_' + name.toUpperCase().replace(/-/g, '_');
}

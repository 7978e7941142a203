/**
 * The state machines of the wiring table (functions/wiring.ts re-exports them): which ASL file each
 * is and which functions its Task states call. Apart so the function table stays one screenful.
 */
import type { StateMachineName } from './core/machines.js';

export interface StateMachineWiring {
  name: string;
  file: string;
  description: string;
  /** Functions its Task states call. */
  functions: string[];
  /** Started on a schedule, every this many minutes (EventBridge Scheduler on AWS, infra/aws/machine-schedules.ts). */
  scheduleRateMinutes?: number;
}

export const STATE_MACHINES = [
  {
    name: 'volume-create',
    file: 'statemachines/volume-create.asl.json',
    description: 'Schedules a new volume onto a pool, creates it on the backend, and makes it available (or error, with capacity released); reserves an attachment for the instance given at create.',
    functions: ['volume-steps', 'attachment-steps'],
  },
  {
    name: 'volume-delete',
    file: 'statemachines/volume-delete.asl.json',
    description: 'Deletes a volume on its backend, releases its capacity and removes its record (or error_deleting).',
    functions: ['volume-steps'],
  },
  {
    name: 'volume-attach-wait',
    file: 'statemachines/volume-attach-wait.asl.json',
    description: 'Waits for an attach the backend accepted but had not finished when attachment_update answered (an EBS attachment attaching): looks at EC2 until it is attached (recorded on the attachment) or gone or past its bound (the attachment error_attaching with the reason, what EC2 holds detached). Ends without touching anything when the attachment was deleted or connected again meanwhile.',
    functions: ['attachment-steps'],
  },
  {
    name: 'volume-failover',
    file: 'statemachines/volume-failover.asl.json',
    description: 'Fails a replicated backend over to a replication target or back (reference §2.4), or runs and ends a drill: batches of volumes in a Map, one driver call and one conditional write per volume.',
    functions: ['replication-steps'],
  },
  {
    name: 'snapshot-create',
    file: 'statemachines/snapshot-create.asl.json',
    description: 'Waits for a volume snapshot the backend is still making (an EBS snapshot pending): creates it on the backend under its stable name, retried while the backend answers BackendNotReady, then marks it available (or error, with whatever the backend made under that name deleted).',
    functions: ['snapshot-steps'],
  },
  {
    name: 'image-import',
    file: 'statemachines/image-import.asl.json',
    description: 'Imports an image\'s data from the URI of a Glance web-download import: streams it to the bucket (every redirect hop filtered) and makes the image active; a failure removes what it stored and puts the image back to queued with the reason on its import task.',
    functions: ['image-import-steps'],
  },
  {
    name: 'replication-schedule',
    file: 'statemachines/replication-schedule.asl.json',
    description: 'The replication schedule (EventBridge Scheduler starts it every few minutes): starts one replication-pass execution per replicated aws-ebs backend, named by the backend and the scheduled time, so a schedule delivered twice starts each pass once.',
    functions: ['replication-pass-steps'],
    scheduleRateMinutes: 5,
  },
  {
    name: 'replication-pass',
    file: 'statemachines/replication-pass.asl.json',
    description: 'One replication pass of one backend (input {"backend"}): ends at once when the backend is frozen, failed over or not enabled (or another pass holds its lease); else pages through its replicated volumes, each page snapshotting, copying to every target region and pruning, then records the lag.',
    functions: ['replication-pass-steps'],
  },
  {
    name: 'share-create',
    file: 'statemachines/share-create.asl.json',
    description: 'Schedules a new share onto a pool (capacity reserved), creates it on the backend and makes it available (or error, with capacity released and no backend share).',
    functions: ['share-steps'],
  },
  {
    name: 'share-delete',
    file: 'statemachines/share-delete.asl.json',
    description: 'Deletes a share on its backend, releases its capacity and removes its record (or error_deleting).',
    functions: ['share-steps'],
  },
  {
    name: 'share-migration-start',
    file: 'statemachines/share-migration-start.asl.json',
    description: 'Phase 1 of a share migration: driver-assisted (migration_start, then migration_continue in a bounded Wait loop) or host-assisted (read-only source, destination, data node access, the copy worker as an ECS task); cancel and every failure undo exactly what was made.',
    functions: ['migration-steps'],
  },
  {
    name: 'share-migration-complete',
    file: 'statemachines/share-migration-complete.asl.json',
    description: 'Phase 2 of a share migration (migration_complete): rules onto the destination, the share flips to it, the source is deleted with its capacity, migration_success.',
    functions: ['migration-steps'],
  },
  {
    name: 'share-migration-cancel',
    file: 'statemachines/share-migration-cancel.asl.json',
    description: 'migration_cancel after phase 1 ended (or of what a failed migration left): removes the destination, restores the source rules, migration_cancelled.',
    functions: ['migration-steps'],
  },
  {
    name: 'server-create',
    file: 'statemachines/server-create.asl.json',
    description: 'Boots a server: schedule and claim, port binding, volume block devices through the attachments API, spawn; a failure undoes all of it and leaves the instance ERROR.',
    functions: ['server-steps'],
  },
  {
    name: 'server-delete',
    file: 'statemachines/server-delete.asl.json',
    description: 'Deletes a server: guest, attachments (and delete_on_termination volumes), ports, allocations, records.',
    functions: ['server-steps'],
  },
  {
    name: 'server-power',
    file: 'statemachines/server-power.asl.json',
    description: 'Stops, starts or hard-reboots a server.',
    functions: ['server-steps'],
  },
  {
    name: 'server-attach-volume',
    file: 'statemachines/server-attach-volume.asl.json',
    description: 'Attaches a volume on the compute host (attachment_update, driver attach, attachment_complete), or rolls it back.',
    functions: ['server-steps'],
  },
  {
    name: 'server-detach-volume',
    file: 'statemachines/server-detach-volume.asl.json',
    description: 'Detaches a volume on the compute host (driver detach, attachment_delete), or rolls the volume back to in-use.',
    functions: ['server-steps'],
  },
  {
    name: 'server-evacuate',
    file: 'statemachines/server-evacuate.asl.json',
    description: 'Evacuates a server off a down host: claim on another host of the cell, volume attachments switched to the destination, spawnEvacuated, migration done; a failure leaves ERROR (or the vm_state when no host was found) and nothing on the destination.',
    functions: ['server-steps'],
  },
  {
    name: 'server-shelve',
    file: 'statemachines/server-shelve.asl.json',
    description: 'Shelves (snapshot to S3) and offloads a server: guest destroyed, volume connections terminated, bindings and allocations released; a failure reverts the task state.',
    functions: ['server-steps'],
  },
  {
    name: 'server-unshelve',
    file: 'statemachines/server-unshelve.asl.json',
    description: 'Unshelves a server: schedule and claim, bindings, volumes connected on the host, spawn from the shelved image or boot volume; a failure leaves it SHELVED_OFFLOADED with nothing held.',
    functions: ['server-steps'],
  },
  {
    name: 'server-swap-volume',
    file: 'statemachines/server-swap-volume.asl.json',
    description: 'Swaps a server volume for another (block copy, new attachment completed, old deleted), or rolls it back.',
    functions: ['server-steps'],
  },
  {
    name: 'server-live-migrate',
    file: 'statemachines/server-live-migrate.asl.json',
    description: 'Live-migrates a server within its cell (schedule, pre_live_migration with new attachments, copy and switch-over, post), rolling back before the switch or finishing forward after it.',
    functions: ['server-steps'],
  },
  {
    name: 'server-resize',
    file: 'statemachines/server-resize.asl.json',
    description: 'Cold migration / resize, same-cell or cross-cell: prep (allocation to the migration, destination claimed); same cell: resize_instance on the source, finish_resize on the destination; cross cell: hidden copy in the target cell, prep at dest and source (snapshot), finish at dest and mapping flip. VERIFY_RESIZE either way; a failure rolls back to the source.',
    functions: ['server-steps'],
  },
  {
    name: 'server-confirm-resize',
    file: 'statemachines/server-confirm-resize.asl.json',
    description: 'Confirms a resize on the source: kept disks removed, source binding deleted, the migration allocation released.',
    functions: ['server-steps'],
  },
  {
    name: 'server-revert-resize',
    file: 'statemachines/server-revert-resize.asl.json',
    description: 'Reverts a resize: destination torn down, then the guest defined again on the source with its volumes and allocations.',
    functions: ['server-steps'],
  },
  {
    name: 'server-cross-cell-confirm',
    file: 'statemachines/server-cross-cell-confirm.asl.json',
    description: 'Confirms a cross-cell resize: kept disks, source bindings and placeholder attachments removed at the source, migration allocation released, the source cell copy hard-deleted.',
    functions: ['server-steps'],
  },
  {
    name: 'server-cross-cell-revert',
    file: 'statemachines/server-cross-cell-revert.asl.json',
    description: 'Reverts a cross-cell resize: source cell copy updated, instance mapping flipped back, destination guest and target cell copy removed, the guest defined again on the source.',
    functions: ['server-steps'],
  },
] as const satisfies readonly (StateMachineWiring & { name: StateMachineName })[];

/**
 * Every change of a share as a pure function: (share, event) -> share | FerryError. repo.ts
 * persists the result with a condition on `version`. Messages follow M/share/api.py.
 */
import { BadRequest, FerryError, NotFound } from '../core/errors.js';
import { BUSY_TASK_STATES, type AccessLevel, type AccessRule, type AccessType, type HeldShareCapacity, type Share, type TaskState } from './model.js';

/** Manila's InvalidShare: 400 "Invalid share: <reason>". */
export class InvalidShare extends BadRequest {
  constructor(reason: string) {
    super(`Invalid share: ${reason}`);
  }
}

/** M/share/api.py delete: statuses a share may be deleted from. */
export const DELETABLE_STATUSES = ['available', 'error', 'inactive'] as const;

export type ShareEvent =
  | { type: 'scheduled'; at: string; capacity: HeldShareCapacity; availabilityZone: string }
  | { type: 'created-on-backend'; at: string; exportLocations: string[] }
  | { type: 'mark-available'; at: string }
  | { type: 'create-failed'; at: string; reason: string }
  | { type: 'capacity-released'; at: string }
  | { type: 'backend-share-released'; at: string }
  | { type: 'begin-delete'; at: string; resume?: boolean }
  | { type: 'delete-failed'; at: string; reason: string }
  | { type: 'update'; at: string; name?: string | null; description?: string | null; isPublic?: boolean }
  | { type: 'access-add'; at: string; id: string; accessType: AccessType; accessTo: string; accessLevel: AccessLevel }
  | { type: 'access-applied'; at: string; ids: string[]; ok: boolean }
  | { type: 'access-deny'; at: string; id: string }
  | { type: 'access-removed'; at: string; id: string }
  /** reset_status (admin): the status only. */
  | { type: 'reset-status'; at: string; status: Share['status'] }
  /** For the migration work: sets the task state (reset_task_state, and each migration step). */
  | { type: 'set-task-state'; at: string; taskState: TaskState | null };

export function isBusy(s: Share): boolean {
  return s.taskState !== null && BUSY_TASK_STATES.includes(s.taskState);
}

export function transition(s: Share, e: ShareEvent): Share | FerryError {
  const next = (changes: Partial<Share>): Share => ({ ...s, ...changes, updatedAt: e.at });
  switch (e.type) {
    case 'scheduled':
      if (s.status !== 'creating') return new InvalidShare(`Share ${s.id} status must be creating to be scheduled, but the current status is ${s.status}.`);
      if (s.capacity) return s.capacity.pool === e.capacity.pool ? s : new InvalidShare(`Share ${s.id} is already scheduled to ${s.capacity.pool}.`);
      return next({ capacity: e.capacity, host: e.capacity.pool, availabilityZone: s.availabilityZone ?? e.availabilityZone });
    case 'created-on-backend':
      if (s.status !== 'creating') return new InvalidShare(`Share ${s.id} status must be creating, but the current status is ${s.status}.`);
      if (!s.host) return new InvalidShare(`Share ${s.id} has not been scheduled.`);
      if (s.ownsBackendShare && JSON.stringify(s.exportLocations) === JSON.stringify(e.exportLocations)) return s;
      return next({ exportLocations: e.exportLocations, ownsBackendShare: true });
    case 'mark-available':
      if (s.status === 'available') return s;
      if (s.status !== 'creating') return new InvalidShare(`Share ${s.id} status must be creating to become available, but the current status is ${s.status}.`);
      if (!s.host || !s.ownsBackendShare) return new InvalidShare(`Share ${s.id} has not been created on a backend.`);
      return next({ status: 'available', errorReason: null });
    case 'create-failed':
      if (s.status === 'error') return s;
      if (s.status !== 'creating') return new InvalidShare(`Share ${s.id} is ${s.status}; its creation cannot be marked failed.`);
      return next({ status: 'error', errorReason: e.reason });
    case 'capacity-released':
      return s.capacity ? next({ capacity: null }) : s;
    case 'backend-share-released':
      return s.ownsBackendShare || s.exportLocations.length ? next({ ownsBackendShare: false, exportLocations: [] }) : s;
    case 'begin-delete':
      if (e.resume && s.status === 'deleting') return s;
      if (isBusy(s)) return new InvalidShare(`Share ${s.id} is busy as part of an active task: ${s.taskState}.`);
      if (s.migration) return new InvalidShare(`Share ${s.id} still holds what a migration left (${s.migration.error ?? 'its record'}); run migration_cancel first.`);
      if (!(DELETABLE_STATUSES as readonly string[]).includes(s.status) && s.status !== 'error_deleting') {
        return new InvalidShare(`Share status must be one of ${DELETABLE_STATUSES.map((x) => `'${x}'`).join(', ')}, 'error_deleting'. Current status is ${s.status}.`);
      }
      return next({ status: 'deleting' });
    case 'delete-failed':
      if (s.status === 'error_deleting') return s;
      if (s.status !== 'deleting') return new InvalidShare(`Share ${s.id} status must be deleting, but the current status is ${s.status}.`);
      return next({ status: 'error_deleting', errorReason: e.reason });
    case 'update':
      return next({
        ...(e.name !== undefined ? { name: e.name } : {}),
        ...(e.description !== undefined ? { description: e.description } : {}),
        ...(e.isPublic !== undefined ? { isPublic: e.isPublic } : {}),
      });
    case 'access-add': {
      if (s.status !== 'available') return new InvalidShare('Share status must be available.');
      if (isBusy(s)) return new InvalidShare(`Share ${s.id} is busy as part of an active task: ${s.taskState}.`);
      const dup = Object.values(s.accessRules).find((r) => r.accessType === e.accessType && r.accessTo === e.accessTo);
      if (dup) return new BadRequest(`Share access ${e.accessType}:${e.accessTo} exists.`);
      const rule: AccessRule = { id: e.id, accessType: e.accessType, accessTo: e.accessTo, accessLevel: e.accessLevel, state: 'queued_to_apply', createdAt: e.at, updatedAt: e.at };
      return next({ accessRules: { ...s.accessRules, [e.id]: rule } });
    }
    case 'access-applied': {
      const rules = { ...s.accessRules };
      let changed = false;
      for (const id of e.ids) {
        const r = rules[id];
        if (!r || r.state === 'queued_to_deny' || r.state === 'denying') continue;
        const state = e.ok ? 'active' : 'error';
        if (r.state !== state) {
          rules[id] = { ...r, state, updatedAt: e.at };
          changed = true;
        }
      }
      return changed ? next({ accessRules: rules }) : s;
    }
    case 'access-deny': {
      const r = s.accessRules[e.id];
      if (!r) return new NotFound(`Access rule ${e.id} could not be found.`);
      if (s.status !== 'available' && s.status !== 'error') return new InvalidShare('Share status must be available or error.');
      if (r.state === 'queued_to_deny') return s;
      return next({ accessRules: { ...s.accessRules, [e.id]: { ...r, state: 'queued_to_deny', updatedAt: e.at } } });
    }
    case 'access-removed': {
      if (!s.accessRules[e.id]) return s;
      const { [e.id]: _gone, ...rest } = s.accessRules;
      return next({ accessRules: rest });
    }
    case 'reset-status':
      return s.status === e.status ? s : next({ status: e.status });
    case 'set-task-state':
      return s.taskState === e.taskState ? s : next({ taskState: e.taskState });
  }
}

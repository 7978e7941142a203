/**
 * The volumes API's policy names (upstream's `volume:*` rules) and their defaults, registered when
 * this module loads (core/policy.ts).
 */
import { registerPolicies } from '../core/policy.js';

export const VOLUME_POLICIES = {
  create: 'volume:create',
  get: 'volume:get',
  getAll: 'volume:get_all',
  update: 'volume:update',
  delete: 'volume:delete',
  extend: 'volume:extend',
  resetStatus: 'volume_extension:volume_admin_actions:reset_status',
  beginDetaching: 'volume:begin_detaching',
  rollDetaching: 'volume:roll_detaching',
  unmanage: 'volume_extension:volume_unmanage',
  action: 'volume:volume_action',
  retype: 'volume:retype',
  updateReadonlyFlag: 'volume:update_readonly_flag',
  forceDelete: 'volume_extension:volume_admin_actions:force_delete',
} as const;

registerPolicies({
  [VOLUME_POLICIES.create]: '@',
  [VOLUME_POLICIES.get]: 'admin_or_owner',
  [VOLUME_POLICIES.getAll]: 'admin_or_owner',
  [VOLUME_POLICIES.update]: 'admin_or_owner',
  [VOLUME_POLICIES.delete]: 'admin_or_owner',
  [VOLUME_POLICIES.extend]: 'admin_or_owner',
  [VOLUME_POLICIES.resetStatus]: 'admin_api',
  [VOLUME_POLICIES.beginDetaching]: 'admin_or_owner',
  [VOLUME_POLICIES.rollDetaching]: 'admin_or_owner',
  [VOLUME_POLICIES.unmanage]: 'admin_api',
  [VOLUME_POLICIES.action]: 'admin_or_owner',
  [VOLUME_POLICIES.retype]: 'admin_or_owner',
  [VOLUME_POLICIES.updateReadonlyFlag]: 'admin_or_owner',
  [VOLUME_POLICIES.forceDelete]: 'admin_api',
});

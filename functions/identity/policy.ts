/**
 * Keystone's default policies (keystone/common/policies, the secure-RBAC defaults) for the calls
 * Ferry answers, with a project-scoped `admin` role standing for the system admin: a member sees
 * its own user and projects, an admin everything; only admins write.
 */
import { forbidden } from './model.js';

export interface Caller {
  userId: string;
  projectId?: string;
  roles: string[];
}

export interface PolicyTarget {
  userId?: string;
  projectId?: string;
}

type Rule = 'admin' | 'admin_or_owner' | 'admin_or_project' | 'owner' | 'admin_or_token_subject';

export const IDENTITY_POLICY: Record<string, Rule> = {
  'identity:list_domains': 'admin',
  'identity:get_domain': 'admin',
  'identity:create_domain': 'admin',
  'identity:update_domain': 'admin',
  'identity:delete_domain': 'admin',
  'identity:list_projects': 'admin',
  'identity:get_project': 'admin_or_project',
  'identity:create_project': 'admin',
  'identity:update_project': 'admin',
  'identity:delete_project': 'admin',
  'identity:list_users': 'admin',
  'identity:get_user': 'admin_or_owner',
  'identity:create_user': 'admin',
  'identity:update_user': 'admin',
  'identity:delete_user': 'admin',
  'identity:list_user_projects': 'admin_or_owner',
  'identity:list_roles': 'admin',
  'identity:get_role': 'admin',
  'identity:create_role': 'admin',
  'identity:delete_role': 'admin',
  'identity:list_role_assignments': 'admin',
  'identity:list_grants': 'admin',
  'identity:check_grant': 'admin',
  'identity:create_grant': 'admin',
  'identity:revoke_grant': 'admin',
  'identity:list_application_credentials': 'admin_or_owner',
  'identity:get_application_credential': 'admin_or_owner',
  'identity:create_application_credential': 'owner',
  'identity:delete_application_credential': 'admin_or_owner',
  'identity:validate_token': 'admin_or_token_subject',
  'identity:check_token': 'admin_or_token_subject',
  'identity:revoke_token': 'admin_or_token_subject',
};

export function isAdmin(caller: Caller): boolean {
  return caller.roles.includes('admin');
}

export function identityAllowed(caller: Caller, action: string, target: PolicyTarget = {}): boolean {
  const rule = IDENTITY_POLICY[action];
  if (!rule) return false;
  const owner = target.userId !== undefined && target.userId === caller.userId;
  switch (rule) {
    case 'admin':
      return isAdmin(caller);
    case 'owner':
      return owner;
    case 'admin_or_owner':
    case 'admin_or_token_subject':
      return isAdmin(caller) || owner;
    case 'admin_or_project':
      return isAdmin(caller) || (target.projectId !== undefined && target.projectId === caller.projectId);
  }
}

/** @throws Keystone's 403 when the policy denies `action`. */
export function enforce(caller: Caller, action: string, target?: PolicyTarget): void {
  if (!identityAllowed(caller, action, target)) throw forbidden(action);
}

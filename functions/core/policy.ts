/**
 * Policy as a rule table in the spirit of oslo.policy. Every API action names its rule here; an
 * operator overrides any entry with FERRY_POLICY (a JSON object of action -> rule).
 *
 * Rules: `admin_api` (admins only), `admin_or_owner` (admins, or members of the target's project),
 * `@` (anyone authenticated), `!` (nobody).
 */
import type { AuthContext } from './auth.js';
import { Forbidden } from './errors.js';

export type Rule = 'admin_api' | 'admin_or_owner' | '@' | '!';

export const DEFAULT_POLICY: Record<string, Rule> = {};

/** Capabilities register their actions' default rules at module load. */
export function registerPolicies(rules: Record<string, Rule>): void {
  for (const [action, rule] of Object.entries(rules)) {
    if (DEFAULT_POLICY[action] && DEFAULT_POLICY[action] !== rule) {
      throw new Error(`policy ${action} registered twice with different rules`);
    }
    DEFAULT_POLICY[action] = rule;
  }
}

let overrides: Record<string, Rule> | undefined;

function loadOverrides(): Record<string, Rule> {
  if (overrides) return overrides;
  const raw = process.env.FERRY_POLICY;
  overrides = {};
  if (raw) {
    const parsed = JSON.parse(raw) as Record<string, string>;
    for (const [k, v] of Object.entries(parsed)) {
      if (!['admin_api', 'admin_or_owner', '@', '!'].includes(v)) throw new Error(`FERRY_POLICY: unknown rule ${v} for ${k}`);
      overrides[k] = v as Rule;
    }
  }
  return overrides;
}

/** For tests: forget cached overrides so a changed FERRY_POLICY is read again. */
export function resetPolicyCache(): void {
  overrides = undefined;
}

export function ruleFor(action: string): Rule {
  const rule = loadOverrides()[action] ?? DEFAULT_POLICY[action];
  if (!rule) throw new Error(`no policy rule for action ${action}`);
  return rule;
}

export function allowed(auth: AuthContext, action: string, target?: { projectId?: string }): boolean {
  switch (ruleFor(action)) {
    case '@':
      return true;
    case '!':
      return false;
    case 'admin_api':
      return auth.isAdmin;
    case 'admin_or_owner':
      return auth.isAdmin || target?.projectId === undefined || target.projectId === auth.projectId;
  }
}

/** @throws Forbidden with upstream's message when the rule denies the action. */
export function authorize(auth: AuthContext, action: string, target?: { projectId?: string }): void {
  if (!allowed(auth, action, target)) {
    throw new Forbidden(`Policy doesn't allow ${action} to be performed.`, { action });
  }
}

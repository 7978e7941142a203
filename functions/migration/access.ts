/**
 * The access rules each instance's backend holds during a migration (reference §1.8):
 *  - the source: the share's rules, all `ro` while the migration casts them read-only, plus the
 *    data node's rule while the host-assisted copy runs (`ro` too: the copy only reads);
 *  - the destination: only the data node's rule (`rw`) until phase 2 applies the share's rules.
 * Upstream gives the data node `rw` on the source as well; Ferry does not need to write there.
 */
import { ConfigurationError } from '../core/errors.js';
import type { DriverAccessRule, ShareDriverKind } from '../drivers/share/driver.js';
import { shareDriverFor } from '../drivers/share/registry.js';
import { rulesForDriver } from '../shares/access.js';
import { backendShareName, type DataNodeIdentity, type Share } from '../shares/model.js';
import { getShareBackend } from '../shares/repo.js';

/**
 * Manila's data_node_access_ips / data_node_access_admin_user: who the copy worker is to a backend
 * of `kind`. To an aws-efs share it is the copy task's IAM role (a `user` rule: the file system
 * policy lets that role mount, and write where the level is rw; the task mounts with IAM, its
 * network being the share's own group, ShareDataNodeDriver.dataNodeMount). Recorded on the
 * migration when the access is given (MigrationDataNode), so every later reader of the rules (the
 * steps, the audit, the quota repair) pushes the same rule.
 */
export function dataNodeAccessTo(proto: string, kind?: ShareDriverKind): DataNodeIdentity {
  if (kind === 'aws-efs') {
    const role = process.env.FERRY_COPY_TASK_ROLE;
    if (!role) throw new ConfigurationError('an aws-efs share can be reached by the copy worker only where the stack has one: FERRY_COPY_TASK_ROLE (the copy task role) is not set');
    return { accessType: 'user', accessTo: role };
  }
  // protocol_access_mapping: ip for NFS, user for CIFS.
  if (proto === 'CIFS') return { accessType: 'user', accessTo: process.env.FERRY_DATA_NODE_ACCESS_USER ?? 'ferry-data' };
  return { accessType: 'ip', accessTo: process.env.FERRY_DATA_NODE_ACCESS_IP ?? '127.0.0.1' };
}

export const dataNodeRuleId = (migrationId: string) => `data-node-${migrationId}`;

function dataNodeRule(s: Share, side: 'source' | 'destination', level: 'ro' | 'rw'): DriverAccessRule {
  // A record written before identities were recorded: the protocol's default, as it was given then.
  const who = s.migration!.dataNode?.[side] ?? dataNodeAccessTo(s.shareProto);
  return { id: dataNodeRuleId(s.migration!.id), ...who, accessLevel: level };
}

/** Pure: the rule set the source instance's backend should hold now. */
export function sourceRules(s: Share): DriverAccessRule[] {
  const m = s.migration;
  const rules = rulesForDriver(s).map((r) => (m?.readOnlyCast ? { ...r, accessLevel: 'ro' as const } : r));
  if (m?.dataNodeAccess) rules.push(dataNodeRule(s, 'source', m.readOnlyCast ? 'ro' : 'rw'));
  return rules;
}

/** Pure: the rule set the destination instance's backend should hold before phase 2. */
export function destinationRules(s: Share): DriverAccessRule[] {
  return s.migration?.dataNodeAccess ? [dataNodeRule(s, 'destination', 'rw')] : [];
}

/** Pushes sourceRules to the source backend (idempotent: update_access replaces the whole set). */
export async function syncSourceRules(s: Share): Promise<void> {
  if (!s.host || !s.ownsBackendShare) return;
  await shareDriverFor(await getShareBackend(s.host)).updateAccess(backendShareName(s.instanceId), sourceRules(s));
}

/** Pushes a rule set to the destination backend share, if there is one. */
export async function syncDestinationRules(s: Share, rules: DriverAccessRule[] = destinationRules(s)): Promise<void> {
  const d = s.migration?.destination;
  if (!d?.ownsBackendShare) return;
  const driver = shareDriverFor(await getShareBackend(d.host));
  if (!(await driver.getShare(backendShareName(d.id)))) return;
  await driver.updateAccess(backendShareName(d.id), rules);
}

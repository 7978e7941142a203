/**
 * The aws-efs driver's access rules, as pure functions: a Manila rule set becomes the NFS ingress
 * of the share's security group and a file system policy, and both are read back into rules.
 *
 * What EFS can enforce, and so what each rule becomes (docs/drivers.md "aws-efs"):
 * - `ip` rules are network access: the security group of the share's mount targets admits NFS
 *   (TCP 2049) from each rule's CIDR (a bare address becomes /32 or /128) and from nothing else.
 *   Clients so admitted mount without IAM (plain `mount -t nfs4`), and EFS evaluates them as
 *   anonymous principals, which a file system policy reaches only through `"AWS": "*"`. Their level
 *   is one statement for all of them (SID_IP_CLIENTS): ClientMount + ClientRootAccess for `ro`,
 *   plus ClientWrite for `rw`. EFS cannot tell one anonymous client from another by address: of
 *   the condition keys EFS evaluates for NFS clients (aws:SecureTransport, aws:SourceIp,
 *   elasticfilesystem:AccessPointArn, elasticfilesystem:AccessedViaMountTarget; no other is
 *   enforced), aws:SourceIp only ever matches public addresses, never a client inside the VPC,
 *   and an access point is chosen by the client, not by its address. So the `ip` rules of one
 *   share must all have one level; a set that mixes `ro` and `rw` ip rules is refused (DriverError,
 *   nothing changed) rather than silently giving a `ro` address write access.
 * - `user` rules are IAM principals (a role of the file system's account, by name, or a full
 *   principal ARN as access_to), each its own statement with the same actions. They take effect
 *   for clients that mount with IAM authorization (the EFS mount helper, `-o tls,iam`), which still
 *   reach the mount targets only from an `ip` rule's range: the security group is the one network
 *   gate, so a `user` rule never opens the network.
 * - No rule at all: a statement denying every client action to everyone (defence in depth beside
 *   a security group with no NFS ingress; without a policy EFS's default grants anonymous clients
 *   everything).
 * Every Allow carries `elasticfilesystem:AccessedViaMountTarget`, which also keeps the policy
 * non-public under EFS's block public access (on by default for new file systems). Root access is
 * granted with both levels, like Manila's NFS exports (no_root_squash): an EFS root directory is
 * root's, 0755, so without it no client could create anything.
 *
 * Where a rule's id, place and spelling live, so that getAccess gives back exactly the set
 * updateAccess was given (the audit compares the two): an ip rule in the description of its
 * security group range (`ferry <n>:<id>:<access_to> ...`: two spellings of one CIDR, 10.0.0.1 and
 * 10.0.0.1/32, share one range), a user rule in its statement's Sid (`ferry-rule-<n>-<r|a>-<id>`,
 * r: access_to was a role name, a: an ARN). The level of ip rules is read from SID_IP_CLIENTS,
 * so what getAccess reports is what the policy enforces.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { DriverAccessRule } from './driver.js';

export const CLIENT_MOUNT = 'elasticfilesystem:ClientMount';
export const CLIENT_WRITE = 'elasticfilesystem:ClientWrite';
export const CLIENT_ROOT = 'elasticfilesystem:ClientRootAccess';
export const SID_IP_CLIENTS = 'ferry-ip-clients';
export const SID_NO_ACCESS = 'ferry-no-access';
/** A Deny of ClientWrite to everyone while the share is over its size (ShareQuotaDriver.enforceQuota). */
export const SID_QUOTA = 'ferry-quota-exceeded';
/** A Deny of ClientWrite to everyone from phase 2 of a migration on (the read-only cast, aws-efs-migration.ts). */
export const SID_MIGRATION_READ_ONLY = 'ferry-migration-read-only';
const VIA_MOUNT_TARGET = { Bool: { 'elasticfilesystem:AccessedViaMountTarget': 'true' } };
const DESCRIPTION_MAX = 255;
/** EFS's limit on a file system policy. */
const POLICY_MAX = 20_000;
const RULE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9-]{0,63}$/;
const USER_SID_RE = /^ferry-rule-(\d+)-([ra])-([A-Za-z0-9-]+)$/;
/** IAM role names (what a bare access_to names) and the principal ARNs EFS policies take. */
const ROLE_NAME_RE = /^[\w+=,.@-]{1,64}$/;
const PRINCIPAL_ARN_RE = /^arn:aws[a-z-]*:iam::\d{12}:(role|user)\/[\w+=,.@/-]{1,512}$/;

export interface PolicyStatement {
  Sid?: string;
  Effect: 'Allow' | 'Deny';
  Principal: { AWS: string | string[] };
  Action: string | string[];
  Resource?: string;
  Condition?: Record<string, Record<string, string>>;
}
export interface PolicyDocument {
  Version: '2012-10-17';
  Id?: string;
  Statement: PolicyStatement[];
}

/** Where the file system lives, from its ARN: the partition and account its role names resolve in. */
export interface FileSystemRef {
  arn: string;
  partition: string;
  account: string;
}

export interface IpEntry {
  n: number;
  id: string;
  accessTo: string;
}

/** What a rule set becomes: NFS ingress (CIDR -> its description) and the policy. */
export interface AccessPlan {
  ingress: Map<string, string>;
  policy: PolicyDocument;
}

export const actionsFor = (level: 'ro' | 'rw') => (level === 'rw' ? [CLIENT_MOUNT, CLIENT_ROOT, CLIENT_WRITE] : [CLIENT_MOUNT, CLIENT_ROOT]);

export function fileSystemRefOf(arn: string): FileSystemRef {
  const [, partition = 'aws', , , account = ''] = arn.split(':');
  return { arn, partition, account };
}

/** `10.0.0.7` -> `10.0.0.7/32`, `10.0.1.9/24` -> `10.0.1.0/24`, IPv6 compressed as EC2 shows it; undefined if not an address. */
export function canonicalCidr(accessTo: string): string | undefined {
  const [addr = '', prefixText, ...rest] = accessTo.split('/');
  if (rest.length > 0 || (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText))) return undefined;
  if (isIPv4(addr)) {
    const prefix = prefixText === undefined ? 32 : Number(prefixText);
    if (prefix > 32) return undefined;
    const value = addr.split('.').reduce((v, o) => v * 256 + Number(o), 0);
    const network = prefix === 0 ? 0 : value - (value % 2 ** (32 - prefix));
    return `${[24, 16, 8, 0].map((s) => Math.floor(network / 2 ** s) % 256).join('.')}/${prefix}`;
  }
  if (isIPv6(addr) && !addr.includes('.')) {
    const prefix = prefixText === undefined ? 128 : Number(prefixText);
    if (prefix > 128) return undefined;
    const [head = '', tail] = addr.toLowerCase().split('::');
    const parts = (s: string) => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
    const h = parts(head);
    const t = tail === undefined ? [] : parts(tail);
    const groups = [...h, ...new Array<number>(8 - h.length - t.length).fill(0), ...t];
    const masked = groups.map((g, i) => {
      const keep = Math.max(0, Math.min(16, prefix - i * 16));
      return keep === 16 ? g : g & (0xffff << (16 - keep)) & 0xffff;
    });
    return `${compressIpv6(masked)}/${prefix}`;
  }
  return undefined;
}

/** RFC 5952: lower case, no leading zeros, the longest run (of two or more) of zero groups as `::`. */
function compressIpv6(groups: number[]): string {
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.len && j - i >= 2) best = { at: i, len: j - i };
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.at < 0) return hex.join(':');
  return `${hex.slice(0, best.at).join(':')}::${hex.slice(best.at + best.len).join(':')}`;
}

/**
 * The ingress and policy a rule set needs, or the reason EFS cannot hold it (a string: the caller
 * refuses the set before changing anything). `quotaBlocked` adds the quota's Deny of writes,
 * `castReadOnly` a migration's (kept through every rule change until the migration ends).
 */
export function planAccess(rules: DriverAccessRule[], fs: FileSystemRef, quotaBlocked: boolean, castReadOnly = false): AccessPlan | string {
  const ranges = new Map<string, IpEntry[]>();
  const users: PolicyStatement[] = [];
  const ipLevels = new Set<string>();
  for (const [n, r] of rules.entries()) {
    if (!RULE_ID_RE.test(r.id)) return `rule id ${JSON.stringify(r.id)} is not 1-64 letters, digits and hyphens`;
    if (r.accessLevel !== 'ro' && r.accessLevel !== 'rw') return `rule ${r.id}: access level ${JSON.stringify(r.accessLevel)} is neither ro nor rw`;
    if (r.accessType === 'ip') {
      const cidr = canonicalCidr(r.accessTo);
      if (!cidr) return `rule ${r.id}: ${JSON.stringify(r.accessTo)} is not an IPv4 or IPv6 address or CIDR`;
      ranges.set(cidr, [...(ranges.get(cidr) ?? []), { n, id: r.id, accessTo: r.accessTo }]);
      ipLevels.add(r.accessLevel);
    } else if (r.accessType === 'user') {
      const form = PRINCIPAL_ARN_RE.test(r.accessTo) ? 'a' : ROLE_NAME_RE.test(r.accessTo) ? 'r' : undefined;
      if (!form) return `rule ${r.id}: ${JSON.stringify(r.accessTo)} is neither an IAM role name nor an IAM role or user ARN`;
      const principal = form === 'a' ? r.accessTo : `arn:${fs.partition}:iam::${fs.account}:role/${r.accessTo}`;
      users.push({ Sid: `ferry-rule-${n}-${form}-${r.id}`, Effect: 'Allow', Principal: { AWS: principal }, Action: actionsFor(r.accessLevel), Resource: fs.arn, Condition: VIA_MOUNT_TARGET });
    } else {
      return `rule ${r.id}: access type ${JSON.stringify(r.accessType)} is not supported by EFS (ip or user)`;
    }
  }
  if (ipLevels.size > 1) {
    return 'the ip rules mix ro and rw: EFS evaluates every client that mounts without IAM as one anonymous principal and cannot tell their addresses apart (aws:SourceIp matches public addresses only), so it cannot hold a read-only address beside a read-write one; give all ip rules one level, or use user (IAM) rules for the other level';
  }
  const ingress = new Map<string, string>();
  for (const [cidr, entries] of ranges) {
    const description = `ferry ${entries.map((e) => `${e.n}:${e.id}:${e.accessTo}`).join(' ')}`;
    if (description.length > DESCRIPTION_MAX) return `the rules on ${cidr} do not fit one security group rule description (${description.length} > ${DESCRIPTION_MAX} characters)`;
    ingress.set(cidr, description);
  }
  const statements: PolicyStatement[] = [];
  const [ipLevel] = ipLevels as Set<'ro' | 'rw'>;
  if (ipLevel) statements.push({ Sid: SID_IP_CLIENTS, Effect: 'Allow', Principal: { AWS: '*' }, Action: actionsFor(ipLevel), Resource: fs.arn, Condition: VIA_MOUNT_TARGET });
  statements.push(...users);
  if (statements.length === 0) statements.push({ Sid: SID_NO_ACCESS, Effect: 'Deny', Principal: { AWS: '*' }, Action: [CLIENT_MOUNT, CLIENT_WRITE, CLIENT_ROOT], Resource: fs.arn });
  if (quotaBlocked) statements.push({ Sid: SID_QUOTA, Effect: 'Deny', Principal: { AWS: '*' }, Action: [CLIENT_WRITE], Resource: fs.arn });
  if (castReadOnly) statements.push(readOnlyCast(fs));
  const policy: PolicyDocument = { Version: '2012-10-17', Id: 'ferry-access', Statement: statements };
  const size = JSON.stringify(policy).length;
  if (size > POLICY_MAX) return `the policy for these rules would be ${size} characters, more than EFS's ${POLICY_MAX}: too many user rules`;
  return { ingress, policy };
}

const readOnlyCast = (fs: FileSystemRef): PolicyStatement => ({ Sid: SID_MIGRATION_READ_ONLY, Effect: 'Deny', Principal: { AWS: '*' }, Action: [CLIENT_WRITE], Resource: fs.arn });

/**
 * The policy with a migration's read-only cast put on (`on`) or lifted, nothing else changed. A
 * file system with no policy (EFS's default grants every client everything) is cast from the
 * policy of no rules, which grants nothing, so lifting the cast never widens what it held.
 */
export function withReadOnlyCast(doc: PolicyDocument | undefined, fs: FileSystemRef, on: boolean): PolicyDocument {
  const base = doc ?? (planAccess([], fs, false) as AccessPlan).policy;
  const kept = base.Statement.filter((st) => st.Sid !== SID_MIGRATION_READ_ONLY);
  return { ...base, Statement: on ? [...kept, readOnlyCast(fs)] : kept };
}

const asList = <T>(v: T | T[] | undefined): T[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);

/** A policy reduced to what it grants, order and EFS's additions (Resource, Sids, Id) aside: two policies that grant the same compare equal. */
export function policyKey(doc: PolicyDocument | undefined): string {
  if (!doc) return '';
  const statements = asList<PolicyStatement>(doc.Statement).map((s) =>
    JSON.stringify([s.Sid?.startsWith('ferry-') ? s.Sid : '', s.Effect, asList(s.Principal?.AWS).sort(), asList(s.Action).sort(), s.Condition ?? {}]),
  );
  return JSON.stringify(statements.sort());
}

export function parsePolicy(text: string | undefined): PolicyDocument | undefined {
  if (!text) return undefined;
  try {
    const doc = JSON.parse(text) as PolicyDocument;
    return { ...doc, Statement: asList<PolicyStatement>(doc.Statement) };
  } catch {
    return undefined;
  }
}

/** What a policy grants, read back: the ip clients' level, the user rules, the quota's and a migration's blocks. `undefined` policy: EFS's default (anonymous clients get everything). */
export function readPolicy(doc: PolicyDocument | undefined): { ipLevel?: 'ro' | 'rw'; users: (IpEntry & { level: 'ro' | 'rw' })[]; quotaBlocked: boolean; castReadOnly: boolean } {
  if (!doc) return { ipLevel: 'rw', users: [], quotaBlocked: false, castReadOnly: false };
  const levelOf = (s: PolicyStatement): 'ro' | 'rw' | undefined => {
    const actions = asList(s.Action);
    return !actions.includes(CLIENT_MOUNT) ? undefined : actions.includes(CLIENT_WRITE) ? 'rw' : 'ro';
  };
  const out: ReturnType<typeof readPolicy> = { users: [], quotaBlocked: false, castReadOnly: false };
  for (const s of doc.Statement) {
    if (s.Sid === SID_QUOTA && s.Effect === 'Deny') out.quotaBlocked = true;
    if (s.Sid === SID_MIGRATION_READ_ONLY && s.Effect === 'Deny') out.castReadOnly = true;
    if (s.Effect !== 'Allow') continue;
    if (s.Sid === SID_IP_CLIENTS && asList(s.Principal?.AWS).includes('*')) out.ipLevel = levelOf(s);
    const m = USER_SID_RE.exec(s.Sid ?? '');
    const level = levelOf(s);
    if (!m || !level) continue;
    const principal = asList(s.Principal?.AWS)[0] ?? '';
    // IAM shows a deleted role's principal as its unique id: then the rule reads back as that id, which the audit flags.
    const role = /^arn:[^:]+:iam::\d{12}:role\/(.+)$/.exec(principal)?.[1];
    out.users.push({ n: Number(m[1]), id: m[3]!, accessTo: m[2] === 'r' && role ? role : principal, level });
  }
  return out;
}

/** The rules one security group range holds (its Ferry description), or none for a range Ferry did not describe. */
export function readDescription(description: string | undefined): IpEntry[] {
  const m = /^ferry((?: \d+:[A-Za-z0-9-]+:\S+)+)$/.exec(description ?? '');
  if (!m) return [];
  return m[1]!
    .trim()
    .split(' ')
    .map((entry) => {
      const [n, id, ...to] = entry.split(':');
      return { n: Number(n), id: id!, accessTo: to.join(':') };
    });
}

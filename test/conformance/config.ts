/**
 * Tempest's configuration for a running Ferry stack (issue 15), as text: tempest.conf and, for
 * pre-provisioned credentials, accounts.yaml. Pure: test/conformance/run.ts gathers the inputs
 * from the stack (its URL, the clouds.yaml that `npm start` writes, the version documents, the
 * scheduler's pools, the flavors and images) and writes the files into a `tempest init` workspace.
 *
 * The feature flags say what Ferry does. A flag is off only where Ferry deliberately does not do
 * it (FLAGS_OFF, each with its reason, all listed in docs/conformance.md, which a unit test checks);
 * a gap Ferry means to close stays on, so it shows as a failure instead of a skip.
 */
import { stringify } from 'yaml';

export interface Account {
  username: string;
  password: string;
  projectName: string;
  userDomainName: string;
  projectDomainName: string;
  roles: string[];
}

export interface Microversions {
  min: string;
  max: string;
}

export interface TempestInputs {
  /** The stack's base URL, e.g. http://127.0.0.1:8780 */
  baseUrl: string;
  workspace: string;
  admin: Account;
  /**
   * dynamic: Tempest creates a project and users per test class through Ferry's identity (admin);
   * accounts: the pre-provisioned accounts of accounts.yaml, shared by the test classes.
   */
  credentials: 'dynamic' | 'accounts';
  volume: Microversions;
  compute: Microversions;
  /** Backend names as volume_backend_name (the pool names' host part after '@', before '#'). */
  backendNames: string[];
  storageProtocol: string;
  vendorName: string;
  imageRef: string;
  imageRefAlt: string;
  flavorRef: string;
  flavorRefAlt: string;
  /** The network servers boot on when a test names none; Ferry has no per-project networks to make. */
  networkName: string;
  /** How many compute hosts the stack has: the migration tests need two. */
  computeNodes: number;
  /** The aliases of the stack's Neutron extensions (GET /network/v2.0/extensions). */
  networkExtensions: string[];
  /** The aliases GET /volume/v3/extensions lists (Tempest's default 'all' expects os-hosts). */
  volumeExtensions: string[];
}

export interface Flag {
  section: string;
  name: string;
  value: boolean;
  /** Why it is off: what Ferry does not do. */
  reason?: string;
}

/** Every flag off, with what Ferry does not do. docs/conformance.md lists each one. */
export const FLAGS_OFF: Flag[] = [
  { section: 'volume-feature-enabled', name: 'backup', value: false, reason: 'Ferry has no cinder-backup service (no /backups API).' },
  { section: 'volume-feature-enabled', name: 'extend_attached_encrypted_volume', value: false, reason: 'Ferry has no volume encryption.' },
  { section: 'compute-feature-enabled', name: 'attach_encrypted_volume', value: false, reason: 'Ferry has no volume encryption (no encryption types, no key manager).' },
  { section: 'compute-feature-enabled', name: 'console_output', value: false, reason: 'Ferry\'s guests are simulated: there is no console log to return (os-getConsoleOutput).' },
  { section: 'compute-feature-enabled', name: 'rescue', value: false, reason: 'No rescue mode: Ferry moves servers, it does not repair guests.' },
  { section: 'compute-feature-enabled', name: 'change_password', value: false, reason: 'No guest agent to set an admin password.' },
  { section: 'compute-feature-enabled', name: 'interface_attach', value: false, reason: 'Ports are fixed at boot; Ferry has no os-interface attach/detach.' },
  { section: 'compute-feature-enabled', name: 'metadata_service', value: false, reason: 'No metadata service for guests.' },
  { section: 'compute-feature-enabled', name: 'config_drive', value: false, reason: 'No config drive.' },
  { section: 'compute-feature-enabled', name: 'personality', value: false, reason: 'File injection is removed upstream (2.57) and Ferry has no guest filesystem to inject into.' },
  { section: 'compute-feature-enabled', name: 'vnc_console', value: false, reason: 'No remote consoles (VNC/SPICE/RDP/serial).' },
  { section: 'compute-feature-enabled', name: 'snapshot', value: false, reason: 'No createImage of a server: images come from the inventory and from shelve only.' },
  { section: 'compute-feature-enabled', name: 'disk_config', value: false, reason: 'No OS-DCF:diskConfig extension (Nova removed it from libvirt use too).' },
  { section: 'compute-feature-enabled', name: 'xenapi_apis', value: false, reason: 'No XenAPI.' },
  { section: 'compute-feature-enabled', name: 'ide_bus', value: false, reason: 'Simulated guests have no IDE bus.' },
  { section: 'identity-feature-enabled', name: 'api_v2', value: false, reason: 'Keystone v2.0 was removed upstream (Queens); Ferry serves v3 only.' },
  { section: 'identity-feature-enabled', name: 'api_v2_admin', value: false, reason: 'Keystone v2.0 admin API: removed upstream; v3 only.' },
  { section: 'identity-feature-enabled', name: 'trust', value: false, reason: 'No OS-TRUST: Ferry\'s identity serves what the tools use (passwords, tokens, application credentials).' },
  { section: 'identity-feature-enabled', name: 'project_tags', value: false, reason: 'No project tags.' },
  { section: 'identity-feature-enabled', name: 'access_rules', value: false, reason: 'No application-credential access rules.' },
  { section: 'identity-feature-enabled', name: 'security_compliance', value: false, reason: 'No password-expiry or lockout rules.' },
];

/** Flags on: what Ferry does (defaults Tempest leaves off included). */
export const FLAGS_ON: Flag[] = [
  { section: 'volume-feature-enabled', name: 'snapshot', value: true },
  { section: 'volume-feature-enabled', name: 'clone', value: true },
  { section: 'volume-feature-enabled', name: 'multi_backend', value: true },
  { section: 'volume-feature-enabled', name: 'manage_volume', value: true },
  { section: 'volume-feature-enabled', name: 'manage_snapshot', value: true },
  { section: 'volume-feature-enabled', name: 'extend_attached_volume', value: true },
  { section: 'compute-feature-enabled', name: 'resize', value: true },
  { section: 'compute-feature-enabled', name: 'cold_migration', value: true },
  { section: 'compute-feature-enabled', name: 'live_migration', value: true },
  { section: 'compute-feature-enabled', name: 'live_migrate_back_and_forth', value: true },
  { section: 'compute-feature-enabled', name: 'block_migration_for_live_migration', value: true },
  { section: 'compute-feature-enabled', name: 'volume_backed_live_migration', value: true },
  // Tempest's name says iSCSI; what it tests is a block migration with a volume attached, which Ferry does for any protocol.
  { section: 'compute-feature-enabled', name: 'block_migrate_cinder_iscsi', value: true },
  { section: 'compute-feature-enabled', name: 'can_migrate_between_any_hosts', value: true },
  { section: 'compute-feature-enabled', name: 'shelve', value: true },
  { section: 'compute-feature-enabled', name: 'shelve_migrate', value: true },
  { section: 'compute-feature-enabled', name: 'pause', value: true },
  { section: 'compute-feature-enabled', name: 'suspend', value: true },
  { section: 'compute-feature-enabled', name: 'swap_volume', value: true },
  // Nova's default: the create response carries adminPass (Tempest's response schema depends on it).
  { section: 'compute-feature-enabled', name: 'enable_instance_password', value: true },
  { section: 'compute-feature-enabled', name: 'volume_multiattach', value: true },
  { section: 'identity-feature-enabled', name: 'api_v3', value: true },
  { section: 'identity-feature-enabled', name: 'application_credentials', value: true },
];

export const SERVICES: Record<string, boolean> = {
  cinder: true,
  nova: true,
  glance: true,
  neutron: true,
  swift: false,
  horizon: false,
  heat: false,
  manila: false, // manila-tempest-plugin is not packaged in Debian: no Tempest tests to run
};

function ini(sections: Record<string, Record<string, string | number | boolean>>): string {
  return Object.entries(sections)
    .map(([name, kv]) => `[${name}]\n${Object.entries(kv).map(([k, v]) => `${k} = ${String(v)}`).join('\n')}\n`)
    .join('\n');
}

export function tempestConf(i: TempestInputs): string {
  const flags: Record<string, Record<string, boolean>> = {};
  for (const f of [...FLAGS_ON, ...FLAGS_OFF]) (flags[f.section] ??= {})[f.name] = f.value;
  const dynamic = i.credentials === 'dynamic';
  return ini({
    DEFAULT: { log_dir: `${i.workspace}/logs`, log_file: 'tempest.log' },
    oslo_concurrency: { lock_path: `${i.workspace}/tempest_lock` },
    auth: {
      use_dynamic_credentials: dynamic,
      // Ferry's networks come from the inventory; a project gets no network, subnet or router of its own.
      create_isolated_networks: false,
      ...(dynamic
        ? {
            admin_username: i.admin.username,
            admin_password: i.admin.password,
            admin_project_name: i.admin.projectName,
            admin_domain_name: i.admin.userDomainName,
            admin_user_domain_name: i.admin.userDomainName,
            admin_project_domain_name: i.admin.projectDomainName,
            // Keystone's default roles: a dynamic user gets `member` (the role Ferry's policies ask for).
            tempest_roles: 'member',
          }
        : { test_accounts_file: `${i.workspace}/etc/accounts.yaml` }),
      default_credentials_domain_name: i.admin.userDomainName,
    },
    identity: {
      uri_v3: `${i.baseUrl}/identity/v3`,
      auth_version: 'v3',
      region: 'RegionOne',
      v3_endpoint_type: 'public',
      admin_role: 'admin',
      default_domain_id: 'default',
    },
    // No Keystone extension (OS-INHERIT, OS-EC2, OS-EP-FILTER...): Tempest skips their tests.
    'identity-feature-enabled': { ...flags['identity-feature-enabled'], api_extensions: '' },
    service_available: SERVICES,
    volume: {
      catalog_type: 'volumev3',
      endpoint_type: 'publicURL',
      region: 'RegionOne',
      min_microversion: i.volume.min,
      max_microversion: i.volume.max,
      backend_names: i.backendNames.join(','),
      storage_protocol: i.storageProtocol,
      vendor_name: i.vendorName,
      volume_size: 1,
      build_interval: 1,
      build_timeout: 120,
    },
    // What the stack's Cinder lists, not Tempest's 'all' (which looks for os-hosts, not in Ferry).
    'volume-feature-enabled': { ...flags['volume-feature-enabled'], api_extensions: i.volumeExtensions.join(',') },
    compute: {
      catalog_type: 'compute',
      endpoint_type: 'publicURL',
      region: 'RegionOne',
      min_microversion: i.compute.min,
      max_microversion: i.compute.max,
      image_ref: i.imageRef,
      image_ref_alt: i.imageRefAlt,
      flavor_ref: i.flavorRef,
      flavor_ref_alt: i.flavorRefAlt,
      fixed_network_name: i.networkName,
      min_compute_nodes: i.computeNodes,
      build_interval: 1,
      build_timeout: 120,
    },
    'compute-feature-enabled': flags['compute-feature-enabled']!,
    image: { catalog_type: 'image', region: 'RegionOne', endpoint_type: 'publicURL', build_timeout: 120 },
    network: { catalog_type: 'network', region: 'RegionOne', endpoint_type: 'publicURL', project_networks_reachable: false },
    // What the stack's Neutron lists, not Tempest's 'all': a test that needs another (trunk) skips.
    'network-feature-enabled': { api_extensions: i.networkExtensions.join(',') },
    // Ferry's guests are simulated: nothing to ssh or ping into.
    validation: { run_validation: false },
  });
}

/** Tempest's accounts.yaml (tempest/common/preprov_creds.py reads these keys). */
export function accountsYaml(accounts: Account[], adminRole = 'admin'): string {
  return stringify(
    accounts.map((a) => ({
      username: a.username,
      password: a.password,
      project_name: a.projectName,
      user_domain_name: a.userDomainName,
      project_domain_name: a.projectDomainName,
      roles: a.roles,
      ...(a.roles.includes(adminRole) ? { types: ['admin'] } : {}),
    })),
  );
}

/**
 * Runs the upstream OpenStack CLIs (Debian's python3-*client packages) against the local stack
 * and parses the tables they print.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface CliResult {
  stdout: string;
  stderr: string;
  code: number;
}

/** Runs `cinder` with the noauth plugin (reference §4.2): X-Auth-Token `<user>:<project>`. */
export async function cinderCli(endpoint: string, user: string, project: string, args: string[]): Promise<CliResult> {
  const env = clientEnv();
  const argv = ['--os-auth-type', 'noauth', '--os-user-id', user, '--os-project-id', project, '--os-endpoint', endpoint, ...args];
  try {
    const { stdout, stderr } = await run('cinder', argv, { env, timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

// The same parsers the smoke test (scripts/smoke) reads the CLIs' tables with.
export { clientEnv, parseListTable, parsePropertyTable } from '../../scripts/smoke/cli.js';
import { clientEnv } from '../../scripts/smoke/cli.js';

/** Runs `manila` in bypass-url/token mode (reference §4.1): X-Auth-Token `<user>:<project>`, endpoint `<url>/share/v2`. */
export async function manilaCli(endpoint: string, token: string, args: string[]): Promise<CliResult> {
  const env = clientEnv();
  try {
    const { stdout, stderr } = await run('manila', ['--os-token', token, '--bypass-url', endpoint, ...args], { env, timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

/**
 * Runs `nova` the Keystone-free way reference §3.4 verified: `--os-auth-type admin_token
 * --os-endpoint <url>/compute/v2.1 --os-token <token>` with OS_PROJECT_ID and any OS_AUTH_URL.
 */
export async function novaCli(endpoint: string, args: string[], options: { token?: string; project?: string; version?: string } = {}): Promise<CliResult> {
  const env = clientEnv({
    OS_PROJECT_ID: options.project ?? 'admin',
    // Must be non-empty; never contacted with the admin_token plugin.
    OS_AUTH_URL: 'http://keystone.invalid/identity',
  });
  const argv = ['--os-auth-type', 'admin_token', '--os-endpoint', endpoint, '--os-token', options.token ?? 'admin:admin', ...(options.version ? ['--os-compute-api-version', options.version] : []), ...args];
  try {
    const { stdout, stderr } = await run('nova', argv, { env, timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

/**
 * Runs `openstack` (Debian's python3-openstackclient 6.0) with a clouds.yaml file: `cloudsFile`
 * names it, `cloud` the entry. Until Ferry's identity catalog is used, the entry is `admin_token`
 * with one `<service>_endpoint_override` per service, so that commands that resolve names across
 * services (`server create --image NAME --network NAME`) work.
 */
export async function openstackCli(cloudsFile: string, cloud: string, args: string[]): Promise<CliResult> {
  const env = clientEnv({ OS_CLIENT_CONFIG_FILE: cloudsFile });
  try {
    const { stdout, stderr } = await run('openstack', ['--os-cloud', cloud, ...args], { env, timeout: 120_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

/**
 * Runs `glance` (python3-glanceclient 4.1) at `<url>/image` with a token. glanceclient
 * percent-encodes header values, so a noauth `user:project` token arrives as `user%3Aproject`:
 * give it a token without a colon (a Keystone token, or one of `ferry token create`).
 */
export async function glanceCli(imageUrl: string, token: string, args: string[]): Promise<CliResult> {
  const env = clientEnv();
  try {
    const { stdout, stderr } = await run('glance', ['--os-image-url', imageUrl, '--os-auth-token', token, ...args], { env, timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

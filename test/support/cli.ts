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
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8' };
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
export { parseListTable, parsePropertyTable } from '../../scripts/smoke/cli.js';

/** Runs `manila` in bypass-url/token mode (reference §4.1): X-Auth-Token `<user>:<project>`, endpoint `<url>/share/v2`. */
export async function manilaCli(endpoint: string, token: string, args: string[]): Promise<CliResult> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8' };
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
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/root',
    LANG: 'C.UTF-8',
    OS_PROJECT_ID: options.project ?? 'admin',
    // Must be non-empty; never contacted with the admin_token plugin.
    OS_AUTH_URL: 'http://keystone.invalid/identity',
  };
  const argv = ['--os-auth-type', 'admin_token', '--os-endpoint', endpoint, '--os-token', options.token ?? 'admin:admin', ...(options.version ? ['--os-compute-api-version', options.version] : []), ...args];
  try {
    const { stdout, stderr } = await run('nova', argv, { env, timeout: 60_000 });
    return { stdout, stderr, code: 0 };
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: err.stdout ?? '', stderr: err.stderr ?? '', code: typeof err.code === 'number' ? err.code : 1 };
  }
}

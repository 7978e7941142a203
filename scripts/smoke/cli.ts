/**
 * The upstream CLIs as docs/aws.md tells a user to set them up: the setup lines (exports and
 * aliases) are read from the doc's tested block, so the smoke test drives exactly what a user
 * types. Also the prettytable parsers the CLIs' output needs.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const AWS_DOC = resolve(dirname(fileURLToPath(import.meta.url)), '../../docs/aws.md');
const TESTED_MARK = '<!-- tested:';

/** The shell block of docs/aws.md marked as tested (the CLI setup and its example commands). */
export function docBlock(): string {
  const doc = readFileSync(AWS_DOC, 'utf8');
  const mark = doc.indexOf(TESTED_MARK);
  if (mark < 0) throw new Error(`docs/aws.md has no block marked ${TESTED_MARK}`);
  const begin = doc.indexOf('```sh\n', mark) + '```sh\n'.length;
  return doc.slice(begin, doc.indexOf('```', begin));
}

export interface Target {
  /** The API's base URL, with its trailing slash (the stack output ApiUrl). */
  api: string;
  token: string;
  project: string;
}

/** The block with its placeholders filled in for a target. */
export function fillBlock(block: string, t: Target): string {
  return block.replaceAll('<ApiUrl>', t.api).replaceAll('<token from ferry token create>', t.token).replaceAll("<the token's project>", t.project);
}

/** Only the setup lines (export, alias) of the block. */
export function setupLines(t: Target): string {
  return fillBlock(docBlock(), t)
    .split('\n')
    .filter((l) => /^(export|alias) /.test(l))
    .join('\n');
}

/**
 * The environment the upstream Python CLIs run in: PATH, HOME, LANG, and two switches that take
 * about 2 s off each cinder or manila start on Debian once python3-eventlet is installed (Tempest
 * and openstacksdk bring it): cinderclient and manilaclient import eventlet, which imports
 * distutils (setuptools' shim, then pkg_resources: 1.3 s) and its green DNS (dnspython: 0.9 s).
 * SETUPTOOLS_USE_DISTUTILS=stdlib takes Python's own distutils; EVENTLET_NO_GREENDNS=yes skips
 * the green resolver, which nothing here uses. README "Using the openstack CLI" tells users.
 */
export function clientEnv(extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', LANG: 'C.UTF-8', SETUPTOOLS_USE_DISTUTILS: 'stdlib', EVENTLET_NO_GREENDNS: 'yes', ...extra };
}

export class CliFailure extends Error {
  override name = 'CliFailure';
}

/** Runs one command line (`cinder ...`, `manila ...`, `nova ...`) after the doc's setup; its stdout, or a CliFailure with stderr. */
export async function cli(t: Target, command: string): Promise<string> {
  const script = `set -euo pipefail\nshopt -s expand_aliases\n${setupLines(t)}\n${command}\n`;
  try {
    const { stdout } = await run('bash', ['-c', script], { env: clientEnv(), timeout: 120_000, maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new CliFailure(`${command}: ${(err.stderr ?? err.message).trim().split('\n').slice(-3).join(' | ')}`);
  }
}

/** `| Property | Value |` rows into an object (later tables of the output merged in). */
export function parsePropertyTable(out: string): Record<string, string> {
  const props: Record<string, string> = {};
  for (const line of out.split('\n')) {
    const m = /^\|\s*(.*?)\s*\|\s*(.*?)\s*\|$/.exec(line.trim());
    if (!m || m[1] === 'Property') continue;
    props[m[1]!] = m[2]!;
  }
  return props;
}

/** A list table into rows keyed by the header cells. */
export function parseListTable(out: string): Record<string, string>[] {
  const lines = out.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('|'));
  if (lines.length === 0) return [];
  const cells = (l: string) => l.slice(1, -1).split('|').map((c) => c.trim());
  const header = cells(lines[0]!);
  return lines.slice(1).map((l) => Object.fromEntries(cells(l).map((c, i) => [header[i], c])));
}

/** Polls `read` until `done` holds; the last value seen is in the error. */
export async function waitFor<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, timeoutMs = 300_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: T | undefined;
  let lastError: unknown;
  while (Date.now() < until) {
    try {
      last = await read();
      if (done(last)) return last;
    } catch (e) {
      lastError = e;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last) ?? String(lastError)}`);
}

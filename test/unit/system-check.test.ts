/**
 * npm start's set-up check (infra/local/system-check.mjs) on a small repository of its own whose
 * scripts/ensure-system.sh only counts its runs: run when there is no stamp (a fresh machine), not
 * again while what it checks is as it was, and again when any of that changes (an edited script,
 * Java gone from PATH, node_modules removed, an unreadable stamp); a failing script ends the start
 * with its code and leaves no stamp.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
// @ts-expect-error: a JavaScript module (npm start runs it before anything is installed).
import { ensureSystem, SYSTEM_STAMP, systemStale } from '../../infra/local/system-check.mjs';

let repo: string;
let env: NodeJS.ProcessEnv;

const write = (path: string, text: string) => {
  mkdirSync(dirname(join(repo, path)), { recursive: true });
  writeFileSync(join(repo, path), text);
};
const runs = () => readFileSync(join(repo, 'runs'), 'utf8').split('\n').filter(Boolean).length;
const SCRIPT = (exit: number) => `#!/usr/bin/env bash\necho "ran $1" >> "$(dirname "$0")/../runs"\nexit ${exit}\n`;
const noExit = (code: number): never => {
  throw new Error(`exit ${code}`);
};

beforeEach(() => {
  repo = mkdtempSync(join(tmpdir(), 'ferry-system-check-'));
  write('runs', '');
  write('scripts/ensure-system.sh', SCRIPT(0));
  write('node_modules/.package-lock.json', '{}');
  mkdirSync(join(repo, 'node_modules/.bin'));
  // A PATH with bash (to run the script) and a java and qemu-img of our own.
  write('bin/java', '#!/bin/sh\n');
  write('bin/qemu-img', '#!/bin/sh\n');
  chmodSync(join(repo, 'bin/java'), 0o755);
  chmodSync(join(repo, 'bin/qemu-img'), 0o755);
  env = { ...process.env, PATH: `${join(repo, 'bin')}:/usr/bin:/bin` };
});

afterEach(() => rmSync(repo, { recursive: true, force: true }));

describe("npm start's set-up check", () => {
  it('runs the script once on a fresh checkout, then not while nothing it checks has changed', () => {
    expect(systemStale(repo, env)).toBe('no stamp yet');
    expect(ensureSystem(repo, { env, exit: noExit })).toBe('no stamp yet');
    expect(runs()).toBe(1);
    expect(readFileSync(join(repo, 'runs'), 'utf8')).toBe('ran start\n');
    expect(systemStale(repo, env)).toBeUndefined();
    expect(ensureSystem(repo, { env, exit: noExit })).toBeUndefined();
    expect(runs()).toBe(1);
  });

  it('runs it again when the script, Java on PATH or the npm packages changed, or the stamp is unreadable', () => {
    ensureSystem(repo, { env, exit: noExit });
    write('scripts/ensure-system.sh', `${SCRIPT(0)}# edited\n`);
    expect(ensureSystem(repo, { env, exit: noExit })).toBe('script changed');
    rmSync(join(repo, 'bin/java'));
    expect(ensureSystem(repo, { env, exit: noExit })).toBe('commands changed');
    rmSync(join(repo, 'node_modules/.package-lock.json'));
    expect(ensureSystem(repo, { env, exit: noExit })).toBe('packages changed');
    writeFileSync(join(repo, SYSTEM_STAMP), '{ half');
    expect(ensureSystem(repo, { env, exit: noExit })).toBe('the stamp is unreadable');
    expect(runs()).toBe(5);
    expect(ensureSystem(repo, { env, exit: noExit })).toBeUndefined();
    expect(runs()).toBe(5);
  });

  it('a failing script ends the start with its exit code and writes no stamp, so the next start runs it again', () => {
    write('scripts/ensure-system.sh', SCRIPT(3));
    expect(() => ensureSystem(repo, { env, exit: noExit })).toThrow('exit 3');
    expect(systemStale(repo, env)).toBe('no stamp yet');
    expect(() => ensureSystem(repo, { env, exit: noExit })).toThrow('exit 3');
    expect(runs()).toBe(2);
  });
});

/**
 * What `npm start` needs beyond Node (scripts/ensure-system.sh start: a Node new enough, Java for
 * DynamoDB Local, qemu-img, the npm packages), checked at every start without running the script
 * when nothing it checks has changed since it last passed (issue 16: the script ran as npm's
 * `prestart`, a shell, bash and a `node --version` before every start: 0.1 CPU s and up to a
 * second of wall time on a loaded machine, for a machine that was ready all along).
 *
 * The stamp (`node_modules/.cache/ferry/system-start.json`) records what the script's checks
 * looked at when it last passed: this Node's version, the script's own contents, where `java` and
 * `qemu-img` are on PATH, and whether the npm packages are installed. A start computes the same
 * from a few stats and one small read; any difference (a new Node, an edited script, Java gone or
 * moved, node_modules removed) runs the script as before, which installs what is missing and
 * stops the start when it cannot, and the stamp is rewritten once it passes. So a fresh Debian
 * machine (no stamp, no node_modules) runs the whole set-up, as the prestart did.
 *
 * Plain JavaScript with Node's own modules only: it runs before anything is installed.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, constants, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { writeJsonWhole } from './write-whole.mjs';

export const SYSTEM_SCRIPT = 'scripts/ensure-system.sh';
export const SYSTEM_STAMP = 'node_modules/.cache/ferry/system-start.json';

/** The commands the script's `start` checks with `command -v`. */
const COMMANDS = ['java', 'qemu-img'];

/** Where `command` is on `path` (the first directory where it is executable), or null: what `command -v` finds. */
function onPath(command, path) {
  for (const dir of (path ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, command), constants.X_OK);
      return join(dir, command);
    } catch {
      // Not here (or not executable): the next directory.
    }
  }
  return null;
}

/**
 * What the script's checks look at, now: equal to the stamp's record exactly when the script would
 * find what it found when it last passed.
 * @param {string} repoRoot
 * @param {NodeJS.ProcessEnv} env
 */
export function systemKey(repoRoot, env = process.env) {
  let script;
  try {
    script = createHash('sha256').update(readFileSync(join(repoRoot, SYSTEM_SCRIPT))).digest('hex');
  } catch (e) {
    if (e.code !== 'ENOENT') throw e;
    script = null;
  }
  return {
    node: process.version,
    script,
    commands: Object.fromEntries(COMMANDS.map((c) => [c, onPath(c, env.PATH)])),
    packages: existsSync(join(repoRoot, 'node_modules/.bin')) && existsSync(join(repoRoot, 'node_modules/.package-lock.json')),
  };
}

/** Why the script must run (no stamp, or what changed since it passed), or undefined when the stamp still holds. */
export function systemStale(repoRoot, env = process.env) {
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(join(repoRoot, SYSTEM_STAMP), 'utf8'));
  } catch (e) {
    if (e.code === 'ENOENT') return 'no stamp yet';
    if (e instanceof SyntaxError) return 'the stamp is unreadable';
    throw e;
  }
  const now = systemKey(repoRoot, env);
  if (now.script === null) return `${SYSTEM_SCRIPT} is missing`;
  const changed = Object.keys(now).filter((k) => JSON.stringify(now[k]) !== JSON.stringify(stamp[k]));
  return changed.length > 0 ? `${changed.join(', ')} changed` : undefined;
}

/** Records that the script passed with what its checks look at now. */
export function writeSystemStamp(repoRoot, env = process.env) {
  const file = join(repoRoot, SYSTEM_STAMP);
  mkdirSync(dirname(file), { recursive: true });
  // Whole or not at all: concurrent starts each rename their own temporary over it.
  writeJsonWhole(file, systemKey(repoRoot, env));
}

/**
 * Runs the script unless the stamp still holds; returns why it ran (systemStale), or undefined. The script's output goes
 * to ours; a script that fails (Node too old, a package it cannot install) ends the start with its
 * exit code, as a failing prestart did.
 * @param {string} repoRoot
 * @param {{ env?: NodeJS.ProcessEnv; exit?: (code: number) => never }} options
 */
export function ensureSystem(repoRoot, options = {}) {
  const env = options.env ?? process.env;
  const exit = options.exit ?? ((code) => process.exit(code));
  const stale = systemStale(repoRoot, env);
  if (stale === undefined) return undefined;
  const run = spawnSync('bash', [join(repoRoot, SYSTEM_SCRIPT), 'start'], { cwd: repoRoot, env, stdio: 'inherit' });
  if (run.error) {
    console.error(`ferry: could not run ${SYSTEM_SCRIPT} (${run.error.message})`);
    return exit(1);
  }
  if (run.status !== 0) return exit(run.status ?? 1);
  writeSystemStamp(repoRoot, env);
  return stale;
}

/**
 * Which state machine definitions asl-validator has passed, by content (issue 16: a fast start).
 *
 * aws-local-stepfunctions validates a definition with asl-validator in its StateMachine
 * constructor, and asl-validator compiles its JSON schemas anew for every definition: 70-100 ms
 * each on this 2-core machine, 2-2.5 s of every start for Ferry's 24 machines. The same text checked
 * by the same validator versions gets the same verdict, so a definition that passed once is not
 * checked again. Only passes are kept: a broken definition fails every start, as before.
 *
 * The record lives in `node_modules/.cache/ferry/` (the cache folder npm tools share): one for every
 * data directory of the checkout, so a first start on a new directory profits too, and it goes
 * with a reinstall. Written whole to a temp file and renamed, so concurrent starts (tests) never read
 * half a record; of two writers the last wins, and the other's passes are merely checked again.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** Kept at most: Ferry has 24 machines; the rest are earlier versions of them and tests' fixtures. */
const MAX_ENTRIES = 2000;

export interface AslValidationCache {
  /** True when this exact definition passed before. */
  passed(definitionText: string): boolean;
  /** Records a pass. */
  pass(definitionText: string): void;
  /** Writes the record when something was added. */
  save(): void;
}

/** The cache under `<repoRoot>/node_modules/.cache/ferry/`. */
export function aslValidationCache(repoRoot: string): AslValidationCache {
  const dir = join(repoRoot, 'node_modules', '.cache', 'ferry');
  const file = join(dir, 'asl-validated.json');
  // The verdict depends on the validator the interpreter loads (its own copy) and on the options it passes.
  const interpreter = require.resolve('aws-local-stepfunctions');
  const validator = createRequire(interpreter).resolve('asl-validator');
  const versions = `${packageVersion(interpreter)} ${packageVersion(validator)}`;
  const key = (text: string) => createHash('sha256').update(versions).update('\0').update(text).digest('hex');
  const known = new Set(read(file));
  const added: string[] = [];
  return {
    passed: (text) => known.has(key(text)),
    pass(text) {
      const k = key(text);
      if (known.has(k)) return;
      known.add(k);
      added.push(k);
    },
    save() {
      if (added.length === 0) return;
      const entries = [...known].slice(-MAX_ENTRIES);
      const temp = `${file}.${process.pid}.${Date.now()}`;
      try {
        mkdirSync(dir, { recursive: true });
        writeFileSync(temp, JSON.stringify(entries));
        renameSync(temp, file);
      } catch (e) {
        // A read-only checkout (node_modules not ours to write): the machines validate at every
        // start, as they did before this cache. Anything else is a real fault.
        if (!['EACCES', 'EROFS', 'EPERM'].includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
      }
    },
  };
}

function read(file: string): string[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    // No record yet: every machine is validated once.
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  try {
    const parsed = JSON.parse(text) as unknown;
    return Array.isArray(parsed) ? parsed.filter((k): k is string => typeof k === 'string') : [];
  } catch (e) {
    // A damaged record costs only a validation of each machine; it is rewritten after this start.
    if (e instanceof SyntaxError) return [];
    throw e;
  }
}

/** `name@version` of the package a resolved file belongs to (packages may not export their package.json). */
function packageVersion(resolvedFile: string): string {
  for (let dir = dirname(resolvedFile); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (!existsSync(manifest)) continue;
    const { name, version } = JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string; version?: string };
    // Build folders may hold a package.json of their own (`{"type": "module"}`): the package's has a name.
    if (name && version) return `${name}@${version}`;
  }
  throw new Error(`no package.json with a name and version above ${resolvedFile}`);
}

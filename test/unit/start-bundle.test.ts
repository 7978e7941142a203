/**
 * The start bundle (infra/local/start-bundle.mjs) on a small repository of its own shape: built
 * when there is none, used while every source is as it was, rebuilt when a source changes or a
 * source file is gone, and the rebuilt bundle runs the changed code. The bundle keeps each source's
 * own import.meta.url and runs a handler module through the registry, from the bundle's own chunk.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
// @ts-expect-error: a JavaScript module (npm start runs it before any TypeScript loader exists).
import { buildStartBundle, currentBundle, startBundle } from '../../infra/local/start-bundle.mjs';

type Current = { file: string } | { stale: string };
type Started = { file: string; state: 'current' | 'built'; reason?: string };

let repo: string;
let cache: string;

const write = (path: string, text: string) => {
  mkdirSync(dirname(join(repo, path)), { recursive: true });
  writeFileSync(join(repo, path), text);
};

/** Runs the bundle in a Node of its own (no TypeScript loader): what it printed. */
const run = (file: string) => execFileSync(process.execPath, [file], { encoding: 'utf8' }).trim();

beforeEach(() => {
  repo = mkdtempSync(join(tmpdir(), 'ferry-start-bundle-'));
  cache = join(repo, 'cache');
  write('tsconfig.json', JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', strict: true } }));
  write(
    'functions/wiring.ts',
    "export const FUNCTIONS: { name: string; entry: string }[] = [{ name: 'hello-api', entry: 'functions/api/hello.ts' }];\n",
  );
  write('functions/api/hello.ts', "import { greeting } from '../greeting.js';\nexport const handler = (): string => greeting('handler');\n");
  write('functions/greeting.ts', "export const greeting = (who: string): string => `hello from ${who}`;\n");
  write(
    'infra/local/handler-modules.ts',
    readFileSync(join(import.meta.dirname, '../../infra/local/handler-modules.ts'), 'utf8'),
  );
  write(
    'infra/local/main.ts',
    [
      "import { bundledHandlerModule } from './handler-modules.js';",
      "import { greeting } from '../../functions/greeting.js';",
      'const mod = await bundledHandlerModule(\'functions/api/hello.ts\')!();',
      'console.log(greeting(\'main\'));',
      'console.log((mod.handler as () => string)());',
      'console.log(import.meta.url);',
    ].join('\n'),
  );
});

afterEach(() => rmSync(repo, { recursive: true, force: true }));

describe('the start bundle', () => {
  it('is built when there is none, then used as long as the sources are unchanged', async () => {
    expect(currentBundle(repo, cache) as Current).toEqual({ stale: 'no bundle yet' });
    const file = (await buildStartBundle(repo, cache)) as string;
    expect(run(file).split('\n')).toEqual([
      'hello from main',
      'hello from handler',
      // main.ts's own URL, not the bundle's: what it finds beside itself is found as from TypeScript.
      `file://${join(repo, 'infra/local/main.ts')}`,
    ]);
    expect(currentBundle(repo, cache) as Current).toEqual({ file });
  });

  it('is rebuilt when a source changes, and the new bundle runs the changed code', async () => {
    const first = (await buildStartBundle(repo, cache)) as string;
    write('functions/greeting.ts', "export const greeting = (who: string): string => `bonjour from ${who}`;\n");
    expect(currentBundle(repo, cache) as Current).toEqual({ stale: 'functions/greeting.ts changed' });
    const started = (await startBundle(repo, cache)) as Started;
    expect(started.state).toBe('built');
    expect(started.reason).toBe('functions/greeting.ts changed');
    expect(started.file).not.toBe(first);
    expect(run(started.file).split('\n').slice(0, 2)).toEqual(['bonjour from main', 'bonjour from handler']);
    // Built once: the next start uses it.
    expect(((await startBundle(repo, cache)) as Started).state).toBe('current');
  });

  it('hashes only a source whose stat differs: a touched file is re-recorded, an edit that keeps size and modification time is still seen', async () => {
    const file = (await buildStartBundle(repo, cache)) as string;
    const record = () => JSON.parse(readFileSync(join(cache, 'current.json'), 'utf8')) as { stats: Record<string, string> };
    const statBefore = record().stats['functions/greeting.ts'];
    expect(statBefore).toMatch(/^\d+:\d+:\d+:\d+$/);
    // The kernel's file times move in ticks of a few ms: each write below lands in a later tick than the stat before it.
    const nextTick = () => new Promise((r) => setTimeout(r, 20));
    await nextTick();
    // Rewritten as it was (a checkout): the same bundle, and the new stat recorded so the next start hashes nothing.
    write('functions/greeting.ts', readFileSync(join(repo, 'functions/greeting.ts'), 'utf8'));
    expect(currentBundle(repo, cache) as Current).toEqual({ file });
    expect(record().stats['functions/greeting.ts']).not.toBe(statBefore);
    // Same length, modification time set back: the change time still moved, so it is hashed and found changed.
    const { atime, mtime } = statSync(join(repo, 'functions/greeting.ts'));
    await nextTick();
    write('functions/greeting.ts', readFileSync(join(repo, 'functions/greeting.ts'), 'utf8').replace('hello', 'HELLO'));
    utimesSync(join(repo, 'functions/greeting.ts'), atime, mtime);
    expect(currentBundle(repo, cache) as Current).toEqual({ stale: 'functions/greeting.ts changed' });
  });

  it('is rebuilt when a source it was built from is gone, or its record is unreadable', async () => {
    await buildStartBundle(repo, cache);
    write('functions/api/hello.ts', 'export const handler = (): string => "no import";\n');
    rmSync(join(repo, 'functions/greeting.ts'));
    expect((currentBundle(repo, cache) as { stale: string }).stale).toMatch(/^functions\/(api\/hello|greeting)\.ts (changed|is gone)$/);
    writeFileSync(join(cache, 'current.json'), '{ half a rec');
    expect(currentBundle(repo, cache) as Current).toEqual({ stale: 'its record is unreadable' });
  });

  it('refuses a source that does not compile: the caller runs the TypeScript instead', async () => {
    write('functions/greeting.ts', 'export const greeting = (who: string): string => `unclosed;\n');
    await expect(startBundle(repo, cache)).rejects.toThrow(/functions\/greeting.ts:2:0: ERROR: Unterminated string literal/);
    // Nothing half built is left as current.
    expect(currentBundle(repo, cache) as Current).toEqual({ stale: 'no bundle yet' });
  });
});

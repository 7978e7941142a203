/** CPU time of a local stack's processes, for benches that print CPU seconds beside wall time. */
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's utime and stime (USER_HZ: 100 on Linux). */
const CLOCK_TICKS = 100;

/** The fields of /proc/<pid>/stat after the command's closing parenthesis (utime, stime are 11, 12; cutime, cstime 13, 14). */
const statFields = (pid: number | 'self'): string[] => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');

/** CPU seconds of this process's live descendants (DynamoDB Local's JVM, the copy worker if any), from /proc. */
export function childrenCpuSeconds(pid = process.pid): number {
  let ticks = 0;
  const children = (p: number): number[] => {
    try {
      return readdirSync(`/proc/${p}/task`).flatMap((t) => readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number));
    } catch {
      return []; // the process ended meanwhile
    }
  };
  for (const child of children(pid)) {
    try {
      const fields = statFields(child);
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      continue;
    }
    ticks += childrenCpuSeconds(child) * CLOCK_TICKS;
  }
  return ticks / CLOCK_TICKS;
}

/**
 * CPU seconds so far of the whole stack: this process (all its threads), its live descendants, and
 * the children it has waited for (a `qemu-img` run, in cutime and cstime).
 */
export function stackCpuSeconds(): number {
  const own = process.cpuUsage();
  const fields = statFields('self');
  return (own.user + own.system) / 1e6 + (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS + childrenCpuSeconds();
}

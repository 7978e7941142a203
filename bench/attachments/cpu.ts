/**
 * CPU accounting for bench/attachments: the CPU seconds the bench's own node process (HTTP client,
 * front door, handlers, SDK) and the DynamoDB Local JVM it started spend, so that a round reports
 * CPU milliseconds per call, a figure the machine's load does not move as it moves wall time.
 * With BENCH_PROFILE=FILE it also records a V8 CPU profile of the chosen rounds only (not the
 * stack's start, not the ceiling's loops) through node:inspector and prints its top self times.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';

/** Linux reports process times in clock ticks of 1/100 s (`getconf CLK_TCK` on every Linux kernel Ferry runs on). */
const TICKS_PER_SECOND = 100;

/** The pids of this process's children whose command is `java` (DynamoDB Local, through setpriv's exec). */
export function childJvmPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(Number(entry));
    if (stat && stat.ppid === process.pid && stat.comm === 'java') pids.push(Number(entry));
  }
  return pids;
}

/** utime + stime of `pid` in ms, its parent and its command; undefined once it is gone. */
function procStat(pid: number): { comm: string; ppid: number; cpuMs: number } | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command sits in parentheses and may hold spaces: the fields after its last ')' are fixed.
  const close = text.lastIndexOf(')');
  const comm = text.slice(text.indexOf('(') + 1, close);
  const fields = text.slice(close + 2).split(' ');
  // After the command: state(0) ppid(1) ... utime(11) stime(12), per proc(5).
  return { comm, ppid: Number(fields[1]), cpuMs: ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND };
}

export interface CpuSnapshot {
  nodeMs: number;
  jvmMs: number;
}

export function cpuNow(jvmPids: readonly number[]): CpuSnapshot {
  const u = process.cpuUsage();
  return { nodeMs: (u.user + u.system) / 1000, jvmMs: jvmPids.reduce((sum, pid) => sum + (procStat(pid)?.cpuMs ?? 0), 0) };
}

export function cpuSince(before: CpuSnapshot, jvmPids: readonly number[]): CpuSnapshot {
  const now = cpuNow(jvmPids);
  return { nodeMs: now.nodeMs - before.nodeMs, jvmMs: now.jvmMs - before.jvmMs };
}

/** A CPU profile of whatever runs between start() and stop(), over any number of spans. */
export class SpanProfiler {
  private session: Session | undefined;
  private started = false;

  constructor(private readonly file: string | undefined) {}

  async start(): Promise<void> {
    if (!this.file || this.started) return;
    if (!this.session) {
      this.session = new Session();
      this.session.connect();
      await this.session.post('Profiler.enable');
      await this.session.post('Profiler.setSamplingInterval', { interval: 500 });
    }
    await this.session.post('Profiler.start');
    this.started = true;
  }

  /** Ends the span; the profile of all spans so far is written at finish(). */
  async stop(): Promise<void> {
    if (!this.session || !this.started) return;
    const { profile } = await this.session.post('Profiler.stop');
    this.started = false;
    this.profiles.push(profile as CpuProfile);
  }

  private readonly profiles: CpuProfile[] = [];

  /** Writes the spans' profiles (FILE, FILE.2, ...) and prints the top self times of all of them. */
  finish(top = 25): void {
    if (!this.file || this.profiles.length === 0) return;
    this.profiles.forEach((p, i) => writeFileSync(i === 0 ? this.file! : `${this.file}.${i + 1}`, JSON.stringify(p)));
    const selfMs = new Map<string, number>();
    let busy = 0;
    for (const p of this.profiles) {
      for (const [name, ms] of selfTimes(p)) {
        selfMs.set(name, (selfMs.get(name) ?? 0) + ms);
        if (name !== '(idle)') busy += ms;
      }
    }
    console.log(`\nCPU profile of the profiled rounds (${this.file}): ${busy.toFixed(0)} ms busy; top self times:`);
    for (const [name, ms] of [...selfMs].filter(([n]) => n !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, top)) {
      console.log(`  ${ms.toFixed(0).padStart(6)} ms ${((100 * ms) / busy).toFixed(1).padStart(5)}%  ${name}`);
    }
  }
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** Self time in ms per function (name, file below node_modules or the repository, line). */
function selfTimes(p: CpuProfile): Map<string, number> {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const out = new Map<string, number>();
  p.samples.forEach((id, i) => {
    // The first delta runs from the profile's start, before sampling began (hundreds of ms in the
    // inspector's own Profiler.start, shown as `dispatch`): no sample's time.
    if (i === 0) return;
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    const where = url.replace(/^file:\/\//, '').replace(/.*node_modules\//, '').replace(/^.*?\/(functions|infra|bench)\//, '$1/');
    const name = where ? `${functionName || '(anonymous)'} ${where}:${lineNumber + 1}` : functionName;
    out.set(name, (out.get(name) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  });
  return out;
}

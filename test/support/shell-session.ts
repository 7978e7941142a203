/**
 * One bash that a test types command lines into, as a user types them into a terminal: what one
 * line sets (an export, an alias, a function, a variable) holds for the lines after it. Each line
 * is written to a file and `source`d, so it is parsed on its own after the lines before it have
 * run (an alias defined on one line applies on the next, as in an interactive shell); its stdout
 * and stderr go to one file, its exit status comes back on bash's own stdout behind a marker.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface LineResult {
  code: number;
  /** stdout and stderr, interleaved as the line wrote them. */
  output: string;
  ms: number;
}

export class ShellLineTimeout extends Error {
  override name = 'ShellLineTimeout';
}

const MARK = '__FERRY_SHELL_LINE_DONE__';

export interface ShellSession {
  /** The bash's process id (its /proc stat counts the CPU of the commands it waited for). */
  readonly pid: number;
  run(command: string, timeoutMs: number): Promise<LineResult>;
  close(): Promise<void>;
}

export async function startShell(options: { cwd: string; env: Record<string, string> }): Promise<ShellSession> {
  const dir = await mkdtemp(join(tmpdir(), 'ferry-shell-'));
  // Its own process group, so that a line that hangs (a wait without end) is stopped with every
  // process it started.
  const bash: ChildProcessWithoutNullStreams = spawn('bash', ['--noprofile', '--norc'], { cwd: options.cwd, env: options.env, detached: true });
  let stdout = '';
  let exited: string | undefined;
  let wake: (() => void) | undefined;
  bash.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
    wake?.();
  });
  let stderr = '';
  bash.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  bash.on('exit', (code, signal) => {
    exited = `bash exited (${signal ?? code})${stderr ? `: ${stderr.trim()}` : ''}`;
    wake?.();
  });
  // Aliases are off in a non-interactive bash, on in the terminal the README is typed into.
  // pipefail: a client failing inside `$(client … | awk …)` fails its line instead of giving an
  // empty value to the next one.
  bash.stdin.write('shopt -s expand_aliases\nset -o pipefail\n');

  const killGroup = () => {
    try {
      process.kill(-bash.pid!, 'SIGKILL');
    } catch (e) {
      // ESRCH: the group is gone already, which is what the kill is for.
      if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
    }
  };

  return {
    pid: bash.pid!,
    async run(command, timeoutMs) {
      if (exited) throw new Error(exited);
      const started = Date.now();
      const script = join(dir, 'line.sh');
      const out = join(dir, 'out');
      await writeFile(script, `${command}\n`);
      stdout = '';
      bash.stdin.write(`source ${script} > ${out} 2>&1 < /dev/null; printf '\\n${MARK} %d\\n' $?\n`);
      const deadline = started + timeoutMs;
      let m: RegExpExecArray | null;
      while (!(m = new RegExp(`${MARK} (\\d+)`).exec(stdout))) {
        if (exited) throw new Error(`${exited}; output: ${await readFile(out, 'utf8')}`);
        const left = deadline - Date.now();
        if (left <= 0) {
          killGroup();
          throw new ShellLineTimeout(`no end after ${timeoutMs / 1000} s; output so far:\n${await readFile(out, 'utf8')}`);
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, 1000));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
      return { code: Number(m[1]), output: await readFile(out, 'utf8'), ms: Date.now() - started };
    },
    async close() {
      if (!exited) {
        bash.stdin.end();
        killGroup();
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

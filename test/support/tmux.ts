/**
 * A real terminal for a test: a tmux server of the test's own (its own socket, so it never touches
 * another tmux), a session running one command in a pane of a fixed size, and what the screen
 * shows, read with capture-pane as often as the test likes. `close()` ends that server only.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export interface Screen {
  /** Epoch ms when it was captured. */
  at: number;
  text: string;
}

export class Tmux {
  readonly socket = `ferry-test-${process.pid}-${randomBytes(3).toString('hex')}`;
  private started = false;

  private tmux(...args: string[]): string {
    return execFileSync('tmux', ['-L', this.socket, ...args], { encoding: 'utf8', timeout: 10_000 });
  }

  /**
   * Runs `argv` (with `env` added) in a new session `name` of `columns` x `rows`; when it exits the
   * pane prints `[exit N]` and stays, so the test can read the last screen and the exit code.
   */
  run(name: string, argv: string[], options: { cwd: string; env: Record<string, string>; columns?: number; rows?: number }): void {
    const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    const env = Object.entries(options.env).map(([k, v]) => `${k}=${quote(v)}`);
    const command = `cd ${quote(options.cwd)} && env -i ${env.join(' ')} ${argv.map(quote).join(' ')}; echo "[exit $?]"; sleep 3600`;
    this.tmux('new-session', '-d', '-s', name, '-x', String(options.columns ?? 160), '-y', String(options.rows ?? 12), command);
    this.started = true;
  }

  /** The pane's visible text now. */
  capture(name: string): Screen {
    return { at: Date.now(), text: this.tmux('capture-pane', '-p', '-t', name) };
  }

  /**
   * Captures the pane every `everyMs` until `done(screen)` holds; returns every distinct screen seen
   * (in order). Fails after `timeoutMs` with the last screen.
   */
  async until(name: string, done: (text: string) => boolean, options: { everyMs?: number; timeoutMs?: number } = {}): Promise<Screen[]> {
    const screens: Screen[] = [];
    const deadline = Date.now() + (options.timeoutMs ?? 120_000);
    for (;;) {
      const s = this.capture(name);
      if (!screens.length || screens[screens.length - 1]!.text !== s.text) screens.push(s);
      if (done(s.text)) return screens;
      if (Date.now() > deadline) throw new Error(`tmux ${name}: gave up after ${options.timeoutMs ?? 120_000} ms; the screen:\n${s.text}`);
      await new Promise((r) => setTimeout(r, options.everyMs ?? 100));
    }
  }

  close(): void {
    if (this.started) this.tmux('kill-server');
    this.started = false;
  }
}

/** The exit code the pane printed (`[exit N]`), or undefined while the command runs. */
export function exitCodeOf(text: string): number | undefined {
  const m = /\[exit (\d+)\]/.exec(text);
  return m ? Number(m[1]) : undefined;
}

/** Every percentage a progress bar showed across screens (`[###...]  42 %`), in order of appearance. */
export function percentsShown(screens: readonly Screen[]): number[] {
  const out: number[] = [];
  for (const s of screens) {
    for (const m of s.text.matchAll(/\]\s+(\d{1,3}) %/g)) {
      const p = Number(m[1]);
      if (out[out.length - 1] !== p) out.push(p);
    }
  }
  return out;
}

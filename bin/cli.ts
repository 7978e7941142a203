/**
 * What every `ferry` command shares: where its output goes (Io), and what it may throw besides its
 * output, which bin/ferry.ts turns into an exit code: a wrong command line (UsageError: the usage
 * printed, exit 2) or a stack it cannot reach or read (CannotRun: one line with what to do, exit 2).
 */
import { dataDir, errorName, explainError, firstLine, where } from './environment.js';

/** Where a command's output goes; tests pass their own. */
export interface Io {
  out(line: string): void;
  err(line: string): void;
  /** Raw output without a newline, for redrawing a line in place (`ferry watch` on a terminal). */
  write?(text: string): void;
  /** True when the output is a terminal: `ferry watch` redraws in place, otherwise prints plain lines. */
  isTTY?: boolean;
  columns?: number;
}

/** A mistake on the command line: printed with the usage (the command's own when it has one), exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** The command cannot reach what it needs (no stack running, credentials missing): exit code 2. */
export class CannotRun extends Error {
  override name = 'CannotRun';
}

/** `e` from reading the stack, as the one line the operator gets (the full error stays its cause, for --debug). */
export const cannotRead = (e: unknown, what = 'the audit') =>
  new CannotRun(`${what} could not read the stack (${where()}): ${explainError(e) ?? `${errorName(e)}: ${firstLine(e)}`}`, { cause: e });

/** A command that reads the stack needs one: a running local stack or a configured deployment. */
export function requireStack(): void {
  if (process.env.FERRY_DYNAMODB_ENDPOINT || process.env.FERRY_TABLE_VOLUME) return;
  throw new CannotRun(
    `no local stack is running for FERRY_DATA_DIR=${dataDir()} (no stack holds it): start one with \`npm start\`, ` +
      'set FERRY_DATA_DIR to its data directory, or set FERRY_TABLE_VOLUME (and AWS credentials) for a deployed stack',
  );
}

/**
 * What "unit" means, enforced: no JVM and no network. A setup file of the `unit` vitest project
 * only (vitest.config.ts), so it runs in every worker of that tier before the test file is loaded.
 * From then on, in that process:
 *   - listening on a port (net, http, s3rver, the local stack, `freePort()`) throws;
 *   - opening a TCP connection (fetch, an SDK client without a mock) throws;
 *   - starting `java` (DynamoDB Local) throws.
 * The error names the rule, so a test that needs DynamoDB Local, a stack or a port fails loudly
 * and is moved to test/integration instead of slowing the tier down. Child processes that are
 * not Java (a `node` worker, `mkfifo`) and Unix-domain sockets stay allowed.
 */
import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';
import { basename } from 'node:path';
import { promisify } from 'node:util';

const INSTALLED = Symbol.for('ferry.unitTierGuard');

export class UnitTierViolation extends Error {
  override name = 'UnitTierViolation';
  constructor(what: string) {
    super(`unit tier: test/unit must not ${what} (no JVM, no network); a test that needs DynamoDB Local, a stack or a port belongs in test/integration`);
  }
}

/** True when connect() arguments name a Unix-domain socket (a path), not a TCP port. */
function isUnixSocket(args: unknown[]): boolean {
  const first = Array.isArray(args[0]) ? args[0][0] : args[0];
  if (typeof first === 'string') return Number.isNaN(Number(first));
  return typeof first === 'object' && first !== null && typeof (first as { path?: unknown }).path === 'string';
}

function isJava(command: unknown): boolean {
  return typeof command === 'string' && /^java(\.exe)?$/.test(basename(command));
}

/** java itself, or java under setpriv (infra/local/dynamo-process.ts starts DynamoDB Local so). */
function startsJava(command: unknown, args: unknown): boolean {
  if (isJava(command)) return true;
  return typeof command === 'string' && basename(command) === 'setpriv' && Array.isArray(args) && args.some(isJava);
}

export function installUnitTierGuard(): void {
  const g = globalThis as { [INSTALLED]?: boolean };
  if (g[INSTALLED]) return;
  g[INSTALLED] = true;

  net.Server.prototype.listen = function listen(): never {
    throw new UnitTierViolation('listen on a port');
  } as typeof net.Server.prototype.listen;

  const connect = net.Socket.prototype.connect;
  net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
    if (!isUnixSocket(args)) throw new UnitTierViolation('open a network connection');
    return (connect as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof net.Socket.prototype.connect;

  for (const name of ['spawn', 'spawnSync', 'execFile', 'execFileSync'] as const) {
    const original = childProcess[name] as (...a: unknown[]) => unknown;
    const guarded = function (this: unknown, command: unknown, ...rest: unknown[]) {
      if (startsJava(command, rest[0])) throw new UnitTierViolation(`start a JVM (${name} java: DynamoDB Local)`);
      return original.call(this, command, ...rest);
    };
    // promisify(execFile) resolves to {stdout, stderr} through this symbol: keep it on the wrapper.
    const custom = (original as unknown as Record<symbol, unknown>)[promisify.custom];
    if (typeof custom === 'function') {
      const guardedCustom = function (this: unknown, command: unknown, ...rest: unknown[]) {
        if (startsJava(command, rest[0])) throw new UnitTierViolation(`start a JVM (${name} java: DynamoDB Local)`);
        return custom.call(this, command, ...rest);
      };
      Object.defineProperty(guarded, promisify.custom, { value: guardedCustom });
    }
    (childProcess as unknown as Record<string, unknown>)[name] = guarded;
  }
  // ESM named imports (`import { spawn } from 'node:child_process'`) see the guarded functions too.
  syncBuiltinESMExports();
}

installUnitTierGuard();

import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** Below this no port is handed out: the well-known and registered services' ports. */
const LOWEST = 20_000;

/**
 * The kernel's ephemeral range, from which it picks the local port of every outgoing connection.
 * A port from that range can be taken by any connection the moment its listener closes, so a stack
 * killed and started again on the same port could meet EADDRINUSE (a CI run did, at 46091). Ports
 * handed out here lie below it. Linux's default is 32768–60999; elsewhere, or unreadable, assume it.
 */
function ephemeralLow(): number {
  try {
    const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    return low !== undefined && Number.isInteger(low) ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** The port bound, or undefined when it is taken; any other failure (EACCES, …) rejects. */
function tryListen(port: number): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(undefined) : reject(err)));
    srv.listen(port, '127.0.0.1', () => {
      const { port: bound } = srv.address() as { port: number };
      srv.close(() => resolve(bound));
    });
  });
}

/**
 * A free TCP port on 127.0.0.1 that no outgoing connection will take: a random one below the
 * ephemeral range, checked by listening on it, then released. Falls back to one the kernel picks
 * when the range leaves no room below it or fifty tries found none free.
 */
export async function freePort(): Promise<number> {
  const high = ephemeralLow() - 1;
  if (high - LOWEST >= 1_000) {
    for (let attempt = 0; attempt < 50; attempt += 1) {
      const port = await tryListen(LOWEST + Math.floor(Math.random() * (high - LOWEST + 1)));
      if (port !== undefined) return port;
    }
  }
  const port = await tryListen(0);
  if (port === undefined) throw new Error('no free TCP port on 127.0.0.1');
  return port;
}

/**
 * A TCP server that reads every request and answers none: what a client sees of a service that
 * accepted the connection and hangs (a stopped JVM, a black-holed route past the handshake). For the
 * tests of the clients' timeouts (dynamo-timeout, aws-api-timeouts); registers its own hooks.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll } from 'vitest';

/** Starts the server before the file's tests and stops it after; the returned function gives its `http://` endpoint and the sockets it saw. */
export function useSilentServer(): () => { endpoint: string; sockets: Socket[] } {
  let server: Server;
  const sockets: Socket[] = [];
  let endpoint = '';
  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.push(socket);
      socket.on('data', () => undefined); // reads the request, answers nothing
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return () => ({ endpoint, sockets });
}

/**
 * bench/attachments/client.ts (integration tier: it listens on a port): a kept-alive socket the server closed just as a request took it
 * (the front door's idle timeout, shorter than a ceiling round) is sent again on a new socket,
 * once the server never answered on it; any other error still fails the call.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, test } from 'vitest';
import { jsonClient } from '../../bench/attachments/client.js';

let server: Server | undefined;
afterEach(() => new Promise<void>((done) => (server ? server.close(() => done()) : done())));

/** A server that answers the first request of each connection and drops the connection at the second. */
async function dropsReusedConnections(): Promise<string> {
  const served = new WeakSet<object>();
  server = createServer((req, res) => {
    if (served.has(req.socket)) return void req.socket.destroy();
    served.add(req.socket);
    res.end(JSON.stringify({ path: req.url }));
  });
  await new Promise<void>((ok) => server!.listen(0, '127.0.0.1', ok));
  return `http://127.0.0.1:${(server!.address() as AddressInfo).port}`;
}

test('a request on a reused socket the server dropped is sent again on a new one', async () => {
  // Prepare
  const base = await dropsReusedConnections();
  const call = jsonClient('http');
  // Act: the second call takes the first's kept-alive socket, which the server drops
  const first = await call(`${base}/a`, 'GET', {});
  const second = await call(`${base}/b`, 'GET', {});
  // Assess
  expect(first).toEqual({ status: 200, text: '{"path":"/a"}' });
  expect(second).toEqual({ status: 200, text: '{"path":"/b"}' });
});

test('an error on a new socket fails the call', async () => {
  // Prepare: a port nothing listens on
  const base = await dropsReusedConnections();
  await new Promise<void>((done) => server!.close(() => done()));
  server = undefined;
  // Act + Assess
  await expect(jsonClient('http')(`${base}/a`, 'GET', {})).rejects.toMatchObject({ code: 'ECONNREFUSED' });
});

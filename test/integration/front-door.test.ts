/**
 * The local stack's front door (infra/local/http.ts) holds requests to API Gateway's limits and
 * refuses one over them with a real HTTP response: 413 for a body over the payload limit (announced
 * or chunked), 431 for headers over the header limit, 408 for a client that does not finish
 * sending its request in time, never a hang or a TCP reset, and nothing refused reaches a function.
 * Driven with raw `node:net` sockets (an HTTP client would refuse to send most of these), against
 * the real HTTP server with fixture functions and limits lowered so that a timeout takes a second.
 */
import { connect } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import type { FunctionWiring } from '../../functions/wiring.js';
import { FRONT_DOOR_LIMITS, MAX_BODY_BYTES, MAX_REQUEST_LINE_AND_HEADER_VALUES_BYTES } from '../../infra/local/front-door.js';
import { startHttpServer, type LocalHttpServer } from '../../infra/local/http.js';
import { frontDoorCalls } from '../fixtures/front-door/handlers.js';

const FIXTURES: FunctionWiring[] = [
  { name: 'front-door-api', kind: 'api', entry: 'test/fixtures/front-door/handlers.ts', export: 'api', description: 'Answers with the size of the body it got.', httpPrefix: '/fd', tables: [] },
  { name: 'front-door-authorizer', kind: 'authorizer', entry: 'test/fixtures/front-door/handlers.ts', export: 'authorizer', description: 'Lets everyone in.', tables: [] },
];

/** Lowered so that the tests take seconds; the header limit stays API Gateway's own. */
const LIMITS = { maxBodyBytes: 64 * 1024, requestTimeoutMs: 1_000, headersTimeoutMs: 1_000, keepAliveTimeoutMs: 300, lingerMs: 2_000 };
/** How late a timeout may answer on a busy 2-core machine. */
const SLACK_MS = 750;

interface Exchange {
  /** The status line's code, or undefined when no response came. */
  status?: number;
  headers: Record<string, string>;
  body: string;
  /** Milliseconds from the first byte sent to the server closing its side (FIN). */
  closedAfterMs?: number;
  /** A socket error (ECONNRESET: the response was destroyed by a reset). */
  error?: string;
}

/**
 * Sends a whole request on a fresh connection the way curl does: `head`, then (for a streamed body
 * or header) `more.chunk` again and again, paced, until `more.total` bytes, then `more.tail`; it
 * goes on sending whatever the server answers meanwhile, and reads until the server closes. A
 * server that closes on a client still sending makes that client's kernel answer with a reset
 * (the write fails: EPIPE or ECONNRESET), which is what the front door must never cause.
 */
function exchange(server: LocalHttpServer, head: string, more?: { chunk: Buffer; total: number; tail?: string }): Promise<Exchange> {
  return new Promise((resolveExchange) => {
    // Half-open allowed: the client's sending side stays open after the server's FIN, as curl's does.
    const socket = connect({ port: server.port, host: '127.0.0.1', allowHalfOpen: true });
    const started = Date.now();
    const chunks: Buffer[] = [];
    let closedAfterMs: number | undefined;
    let error: string | undefined;
    let sent = 0;
    let allSent = !more;
    const sendMore = () => {
      if (error || !more) return;
      if (sent >= more.total) {
        socket.write(more.tail ?? '');
        allSent = true;
        if (closedAfterMs !== undefined) socket.end();
        return;
      }
      sent += more.chunk.length;
      socket.write(more.chunk, () => setTimeout(sendMore, 1));
    };
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => {
      closedAfterMs = Date.now() - started;
      if (allSent) socket.end();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      error ??= e.code ?? e.message;
    });
    const giveUp = setTimeout(() => socket.destroy(), 10_000);
    socket.on('close', () => {
      clearTimeout(giveUp);
      resolveExchange({ ...parseResponse(Buffer.concat(chunks).toString('latin1')), closedAfterMs, error });
    });
    socket.write(head, () => sendMore());
  });
}

function parseResponse(raw: string): Pick<Exchange, 'status' | 'headers' | 'body'> {
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) return { headers: {}, body: raw };
  const [statusLine, ...lines] = raw.slice(0, end).split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = raw.slice(end + 4);
  if (headers['transfer-encoding'] === 'chunked') body = unchunk(body);
  return { status: Number(statusLine!.split(' ')[1]), headers, body };
}

/** The data of a chunked body (the functions' answers are written chunked). */
function unchunk(raw: string): string {
  let data = '';
  for (let at = 0; at < raw.length; ) {
    const lineEnd = raw.indexOf('\r\n', at);
    const size = parseInt(raw.slice(at, lineEnd), 16);
    if (!(size > 0)) break;
    data += raw.slice(lineEnd + 2, lineEnd + 2 + size);
    at = lineEnd + 2 + size + 2;
  }
  return data;
}

const request = (head: string, body = '') => `${head}\r\n\r\n${body}`;

let server: LocalHttpServer;
beforeAll(async () => {
  server = await startHttpServer({ port: 0, functions: FIXTURES, quiet: true, limits: LIMITS });
});
afterAll(async () => {
  await server?.close();
});

/** After every refusal the server still serves an ordinary request, with a body, through the authorizer and the function. */
afterEach(async () => {
  const before = frontDoorCalls().length;
  const res = await exchange(server, request('POST /fd/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close', '{"a":"bcd"}'));
  expect(res.status).toBe(200);
  expect(JSON.parse(res.body)).toEqual({ bodyBytes: 11 });
  expect(frontDoorCalls().slice(before).map((c) => c.fn)).toEqual(['authorizer', 'api']);
});

describe('the front door', () => {
  test("its limits default to API Gateway's quotas", () => {
    expect(MAX_BODY_BYTES).toBe(10 * 1024 * 1024);
    expect(MAX_REQUEST_LINE_AND_HEADER_VALUES_BYTES).toBe(10_240);
    expect(FRONT_DOOR_LIMITS.requestTimeoutMs).toBe(30_000);
  });

  test('a Content-Length over the body limit is refused at once with 413, and nothing reaches a function', async () => {
    // Prepare
    const before = frontDoorCalls().length;

    // Act: announce 1 MiB (16 times the lowered limit) and send it all, as a client streaming an upload does.
    const total = 1024 * 1024;
    const res = await exchange(server, request(`POST /fd/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: ${total}`), {
      chunk: Buffer.alloc(64 * 1024, 1),
      total,
    });

    // Assess: a whole response, not a reset, and the connection closed.
    expect(res.error).toBeUndefined();
    expect(res.status).toBe(413);
    expect(res.headers['content-type']).toBe('application/json');
    expect(res.headers.connection).toBe('close');
    expect(JSON.parse(res.body)).toEqual({ message: 'Request Entity Too Large' });
    expect(res.closedAfterMs).toBeDefined();
    expect(frontDoorCalls().length).toBe(before);
  });

  test('with Expect: 100-continue, a body over the limit is refused before the client is asked for it', async () => {
    // Act
    const res = await exchange(server, request(`PUT /fd/things HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: ${LIMITS.maxBodyBytes + 1}`));

    // Assess: the final 413, no interim "100 Continue" before it.
    expect(res.status).toBe(413);
    expect(res.body).not.toContain('100 Continue');
  });

  test('a chunked body that grows past the limit is refused with 413, and nothing reaches a function', async () => {
    // Prepare: 256 KiB (four times the lowered limit) in 8 KiB chunks.
    const before = frontDoorCalls().length;
    const chunk = Buffer.from(`2000\r\n${'a'.repeat(8 * 1024)}\r\n`, 'latin1');

    // Act
    const res = await exchange(server, request('POST /fd/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked'), {
      chunk,
      total: 32 * chunk.length,
      tail: '0\r\n\r\n',
    });

    // Assess
    expect(res.error).toBeUndefined();
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toEqual({ message: 'Request Entity Too Large' });
    expect(frontDoorCalls().length).toBe(before);
  });

  test('a chunked body just within the limit goes through whole', async () => {
    // Prepare
    const body = 'b'.repeat(LIMITS.maxBodyBytes);
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;

    // Act
    const res = await exchange(server, request('POST /fd/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close', chunked));

    // Assess
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ bodyBytes: LIMITS.maxBodyBytes });
  });

  test('a 200 KB header gets a real 431 response, not a reset, and the connection is closed', async () => {
    // Prepare
    const before = frontDoorCalls().length;

    // Act: the header sent in 8 KiB pieces, all 200 KiB of it, as curl sends it.
    const res = await exchange(server, 'GET /fd/things HTTP/1.1\r\nHost: x\r\nX-Big: ', { chunk: Buffer.alloc(8 * 1024, 'h'), total: 200 * 1024, tail: '\r\n\r\n' });

    // Assess
    expect(res.error).toBeUndefined();
    expect(res.status).toBe(431);
    expect(JSON.parse(res.body)).toEqual({ message: 'Request Header Fields Too Large' });
    expect(res.closedAfterMs).toBeDefined();
    expect(frontDoorCalls().length).toBe(before);
  });

  test('header values are counted as API Gateway counts them: request line and values, 10240 bytes', async () => {
    // Prepare: two headers whose values, with the request line, come just under and just over the limit.
    const line = 'GET /fd/things HTTP/1.1';
    const fill = (total: number) => {
      const values = total - line.length - 'x'.length; // Host: x
      return `X-A: ${'a'.repeat(Math.floor(values / 2))}\r\nX-B: ${'b'.repeat(Math.ceil(values / 2))}`;
    };
    const before = frontDoorCalls().length;

    // Act
    const under = await exchange(server, request(`${line}\r\nHost: x\r\nConnection: close\r\n${fill(MAX_REQUEST_LINE_AND_HEADER_VALUES_BYTES - 'close'.length)}`));
    const over = await exchange(server, request(`${line}\r\nHost: x\r\n${fill(MAX_REQUEST_LINE_AND_HEADER_VALUES_BYTES + 1)}`));

    // Assess
    expect(under.status).toBe(200);
    expect(over.status).toBe(431);
    expect(frontDoorCalls().slice(before).filter((c) => c.fn === 'api')).toHaveLength(1);
  });

  test('Content-Length: 5 with nothing sent gets 408 within the timeout, and the connection is closed', async () => {
    // Prepare
    const before = frontDoorCalls().length;

    // Act
    const res = await exchange(server, request('POST /fd/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5'));

    // Assess
    expect(res.status).toBe(408);
    expect(JSON.parse(res.body)).toEqual({ message: 'Request Timeout' });
    expect(res.closedAfterMs).toBeGreaterThanOrEqual(LIMITS.requestTimeoutMs / 2);
    expect(res.closedAfterMs).toBeLessThanOrEqual(LIMITS.requestTimeoutMs + SLACK_MS);
    expect(frontDoorCalls().length).toBe(before);
  });

  test('the body sent after a 408 runs nothing', async () => {
    // Prepare: the timeout passes with 2 of the 5 bytes sent; the other 3 come after the 408.
    const before = frontDoorCalls().length;
    const socket = connect(server.port, '127.0.0.1');
    let raw = '';
    socket.on('data', (c: Buffer) => {
      raw += c.toString('latin1');
      if (raw.includes('408')) socket.write('llo', () => undefined);
    });
    socket.on('error', () => undefined);

    // Act
    socket.write(request('POST /fd/things HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5', 'he'));
    await new Promise((done) => socket.on('close', done));

    // Assess
    expect(parseResponse(raw).status).toBe(408);
    expect(frontDoorCalls().length).toBe(before);
  });

  test('headers never finished get 408 within the timeout, and the connection is closed', async () => {
    // Act
    const res = await exchange(server, 'GET /fd/things HTTP/1.1\r\nHost: x\r\nX-Partial: ');

    // Assess
    expect(res.status).toBe(408);
    expect(res.closedAfterMs).toBeGreaterThanOrEqual(LIMITS.headersTimeoutMs / 2);
    expect(res.closedAfterMs).toBeLessThanOrEqual(LIMITS.headersTimeoutMs + SLACK_MS);
  });

  test('a connection that sends nothing at all is closed within the headers timeout', async () => {
    // Act
    const res = await exchange(server, '');

    // Assess: Node answers a silent connection with 408 too; either way it is closed in time.
    expect(res.closedAfterMs).toBeLessThanOrEqual(LIMITS.headersTimeoutMs + SLACK_MS);
  });

  test('an idle keep-alive connection is closed after the keep-alive timeout', async () => {
    // Act: one request on a keep-alive connection, then silence.
    const res = await exchange(server, request('GET /fd/things HTTP/1.1\r\nHost: x'));

    // Assess: answered, then closed by the server (Node adds one second to the timeout it announces).
    expect(res.status).toBe(200);
    expect(res.closedAfterMs).toBeLessThanOrEqual(LIMITS.keepAliveTimeoutMs + 1_000 + SLACK_MS);
  });

  test('a malformed request line gets 400, not a reset', async () => {
    const res = await exchange(server, 'NOT HTTP AT ALL\r\n\r\n');
    expect(res.error).toBeUndefined();
    expect(res.status).toBe(400);
  });
});

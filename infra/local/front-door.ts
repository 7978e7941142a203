/**
 * The local front door's limits and refusals: API Gateway's own (an HTTP API refuses these before
 * any function runs), so the local stack refuses exactly what the deployed one would, with a real
 * HTTP response (413, 431, 408, 400), never a hang or a TCP reset. infra/local/http.ts applies them.
 */
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
/*
 * The front door's limits. The numbers are API Gateway HTTP API quotas ("Quotas for configuring
 * and running an HTTP API in API Gateway",
 * https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html), none of them
 * adjustable on AWS, so the local stack refuses exactly what the deployed one would.
 */

/**
 * Quota "Payload size: 10 MB" (taken as 10 MiB). On AWS a Lambda integration refuses synchronous
 * payloads above 6 MB before that, but that is Lambda's limit, not the front door's.
 */
export const MAX_BODY_BYTES = 10 * 1024 * 1024;
/**
 * Quota "Total combined size of request line and header values: 10240 bytes". Counted as API
 * Gateway counts it (the request line plus every header's value, names not included) once the
 * headers are in; Node's parser, which counts the names too, stops at twice that, so that a
 * request API Gateway accepts always parses and a huge one is refused before it is buffered.
 */
export const MAX_REQUEST_LINE_AND_HEADER_VALUES_BYTES = 10_240;
/**
 * Quota "Maximum integration timeout: 30 seconds". API Gateway documents no separate limit on how
 * long a client may take to send its request; 30 s is the only bound it names on a request's
 * life, so a client gets that long to send headers and body, then a 408 and the connection closed.
 */
export const REQUEST_TIMEOUT_MS = 30_000;
/**
 * How long an idle keep-alive connection is kept for its next request. API Gateway documents no
 * idle timeout; this is Node's own default (5 s, announced in `Keep-Alive: timeout=5`), set here so
 * it is a decision, not an accident: an idle client never holds a connection for long.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 5_000;
/**
 * After a refusal (413, 431, 400) the client may still be sending what it had started (the rest of
 * a body or of a header); closing at once with those bytes unread makes the kernel answer them with
 * a TCP reset, which destroys the refusal before the client reads it. So the connection's sending
 * side is closed, and what still arrives is read and thrown away until the client closes, at most
 * this long (the "lingering close" of Apache and nginx). API Gateway has no counterpart to name.
 */
export const REFUSAL_LINGER_MS = 2_000;

/** The limits the front door holds requests to; tests lower them through `HttpServerOptions.limits`. */
export interface FrontDoorLimits {
  /** Largest body accepted, announced (Content-Length) or received (chunked). */
  maxBodyBytes: number;
  /** Largest request line plus header values, as API Gateway counts them. */
  maxHeaderBytes: number;
  /** Time from a request's first byte to its last (headers and body). */
  requestTimeoutMs: number;
  /** Time from a request's first byte to the end of its headers (at most requestTimeoutMs). */
  headersTimeoutMs: number;
  /** Idle time after a response before a keep-alive connection is closed. */
  keepAliveTimeoutMs: number;
  /** Longest time a refused connection is drained before it is closed. */
  lingerMs: number;
}

export const FRONT_DOOR_LIMITS: Readonly<FrontDoorLimits> = {
  maxBodyBytes: MAX_BODY_BYTES,
  maxHeaderBytes: MAX_REQUEST_LINE_AND_HEADER_VALUES_BYTES,
  requestTimeoutMs: REQUEST_TIMEOUT_MS,
  headersTimeoutMs: REQUEST_TIMEOUT_MS,
  keepAliveTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
  lingerMs: REFUSAL_LINGER_MS,
};

/*
 * The front door's refusals are API Gateway's, made before any function runs, so they take API
 * Gateway's own body shape (`{"message": "..."}`, as it answers a payload over its quota with
 * `{"message":"Request Entity Too Large"}`, and as INTERNAL_ERROR_BODY above), not an OpenStack
 * fault body: those are written by Ferry's functions (functions/core/api.ts), which never see
 * these requests, on AWS as here.
 */
export const PAYLOAD_TOO_LARGE_BODY = { message: 'Request Entity Too Large' };
export const HEADERS_TOO_LARGE_BODY = { message: 'Request Header Fields Too Large' };
export const REQUEST_TIMEOUT_BODY = { message: 'Request Timeout' };
export const BAD_REQUEST_BODY = { message: 'Bad Request' };

/**
 * The request's body, or undefined as soon as it grows past `limit` bytes (a chunked body has no
 * Content-Length to refuse it by): no more than `limit` bytes are ever held; the rest is read and
 * thrown away.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolveBody, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (c: Buffer) => {
      if (over) return;
      size += c.length;
      if (size > limit) {
        over = true;
        chunks.length = 0;
        resolveBody(undefined);
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (!over) resolveBody(Buffer.concat(chunks));
    });
    req.on('error', reject);
  });
}

/**
 * The refusal a request has earned by its headers alone: the request line and header values over
 * API Gateway's limit (431), or a Content-Length over the payload limit (413).
 */
export function refusalBeforeBody(req: IncomingMessage, limits: FrontDoorLimits): { status: number; body: unknown } | undefined {
  let headerBytes = Buffer.byteLength(`${req.method} ${req.url} HTTP/${req.httpVersion}`, 'latin1');
  for (let i = 1; i < req.rawHeaders.length; i += 2) headerBytes += Buffer.byteLength(req.rawHeaders[i]!, 'latin1');
  if (headerBytes > limits.maxHeaderBytes) return { status: 431, body: HEADERS_TOO_LARGE_BODY };
  const length = Number(req.headers['content-length'] ?? 0);
  if (length > limits.maxBodyBytes) return { status: 413, body: PAYLOAD_TOO_LARGE_BODY };
  return undefined;
}

/** How long a refusal closed without lingering may take to reach the client's socket. */
const FLUSH_WAIT_MS = 100;

/** Connections the front door has refused: closing, and nothing more on them is answered. */
export const refused = new WeakSet<Duplex>();

/**
 * Writes the refusal straight onto the connection (there may be no request to answer through:
 * Node's parser gave up before one), closes the sending side, and closes the connection when the
 * client does, or after `lingerMs` at most; meanwhile what the client still sends is read and
 * thrown away (REFUSAL_LINGER_MS says why). With `lingerMs` 0 it closes once the refusal is sent.
 */
export function refuse(socket: Duplex, status: number, body: unknown, lingerMs: number): void {
  if (refused.has(socket)) return;
  refused.add(socket);
  const payload = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
      'content-type: application/json\r\n' +
      `content-length: ${Buffer.byteLength(payload)}\r\n` +
      `date: ${new Date().toUTCString()}\r\n` +
      'connection: close\r\n\r\n' +
      payload,
  );
  const close = () => socket.destroy();
  // With no linger, a refusal that cannot even be flushed (the client reads nothing) is not waited for either.
  const timer = setTimeout(close, lingerMs > 0 ? lingerMs : FLUSH_WAIT_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  // The client closed its side after reading the refusal: nothing more to drain.
  socket.once('end', close);
  if (lingerMs <= 0) socket.once('finish', close);
  socket.on('error', () => undefined);
  socket.resume();
}

/**
 * What Node's parser refuses before there is a request (headers over the limit, not sent in
 * time, malformed) or a request that is not all sent in time: answered with a real HTTP response
 * on the socket (Node's default would destroy a header overflow with unread bytes, which the
 * client sees as a reset). Called again for each later chunk of a refused connection. `responses`
 * holds each connection's latest response: a refusal must not cut into one being written.
 */
export function refuseClientErrors(server: Server, limits: FrontDoorLimits, responses: WeakMap<Duplex, ServerResponse>): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (refused.has(socket)) return;
    const inFlight = responses.get(socket);
    if (err.code === 'ECONNRESET' || !socket.writable || (inFlight && inFlight.headersSent && !inFlight.writableFinished)) {
      socket.destroy();
      return;
    }
    switch (err.code) {
      case 'ERR_HTTP_REQUEST_TIMEOUT':
        // The client stopped sending: nothing to drain, and it must not hold the connection longer.
        return refuse(socket, 408, REQUEST_TIMEOUT_BODY, 0);
      case 'HPE_HEADER_OVERFLOW':
        return refuse(socket, 431, HEADERS_TOO_LARGE_BODY, limits.lingerMs);
      case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
        return refuse(socket, 413, PAYLOAD_TOO_LARGE_BODY, limits.lingerMs);
      default:
        return refuse(socket, 400, BAD_REQUEST_BODY, limits.lingerMs);
    }
  });
}

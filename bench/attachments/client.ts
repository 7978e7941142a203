/**
 * The HTTP client of bench/attachments, which runs in the bench's own process, beside the stack:
 * whatever CPU it spends is counted against the API in the bench's CPU per call, where an upstream
 * client (cinderclient, Nova) spends it in a process of its own.
 *
 * `http` (the default): node:http with a keep-alive Agent, one socket per concurrent client, as a
 * requests/keystoneauth session keeps its connections. `fetch`: the global fetch (undici, with its
 * web streams), as the bench used before; measured side by side it costs the node process more
 * CPU per call than the whole front door does (docs/attachments-bench.md). Each call is a real
 * HTTP request over loopback either way, with the same method, path, headers and JSON body.
 */
import { Agent, request } from 'node:http';

export type BenchClientKind = 'http' | 'fetch';

export interface JsonResponse {
  status: number;
  text: string;
}

export type JsonCall = (url: string, method: string, headers: Record<string, string>, body?: unknown) => Promise<JsonResponse>;

export function benchClientKind(value = process.env.BENCH_CLIENT): BenchClientKind {
  if (value === undefined || value === '' || value === 'http') return 'http';
  if (value === 'fetch') return 'fetch';
  throw new Error(`BENCH_CLIENT=${value}: expected http or fetch`);
}

export function jsonClient(kind: BenchClientKind): JsonCall {
  return kind === 'fetch' ? viaFetch : viaNodeHttp(new Agent({ keepAlive: true }));
}

const viaFetch: JsonCall = async (url, method, headers, body) => {
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
};

function viaNodeHttp(agent: Agent): JsonCall {
  const call: JsonCall = (url, method, headers, body) =>
    new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      // fetch sends a string body with its length too: the same request on the wire, not chunked.
      const sent = payload === undefined ? headers : { ...headers, 'Content-Length': String(payload.length) };
      const req = request(url, { method, headers: sent, agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('error', (e: NodeJS.ErrnoException) => {
        // A kept-alive socket the server closed for idleness (the front door's 5 s, longer than a
        // ceiling round) just as this request took it: the server never read the request, so it
        // is sent again on a new socket, as Node's docs advise (request.reusedSocket).
        if (req.reusedSocket && e.code === 'ECONNRESET') call(url, method, headers, body).then(resolve, reject);
        else reject(e);
      });
      req.end(payload);
    });
  return call;
}

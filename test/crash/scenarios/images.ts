/**
 * Crash scenario of Glance's web-download import (functions/images/import.ts, the image-import
 * machine): a crash at each of its points, then a restart, must leave the image active (the
 * resumed Download finished it) or queued with its import task failed (the compensation or the
 * reconciler put it back), never importing, and nothing under images/ of a queued image.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { findImage } from '../../../functions/servers/images.js';
import type { CrashScenario } from '../../support/crash.js';
import { imageObjectExists } from '../../support/image-objects.js';
import type { TestLocalStack } from '../../support/stack.js';

const BYTES = Buffer.alloc(512 * 1024, 9);
let source: Server | undefined;

/** A local source of the image's bytes, its port allowed by the import filter. */
async function sourceUrl(): Promise<string> {
  if (!source) {
    source = createServer((_req, res) => res.writeHead(200, { 'Content-Length': String(BYTES.length) }).end(BYTES));
    await new Promise<void>((r) => source!.listen(0, '127.0.0.1', r));
    source.unref();
  }
  const port = (source.address() as AddressInfo).port;
  process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = `80,443,${port}`;
  return `http://127.0.0.1:${port}/crash.img`;
}


export const IMAGE_SCENARIOS = ['POST /v2/images/{id}/import (web-download)'];

export function imageScenarios(stack: TestLocalStack): CrashScenario<{ image: string; uri: string }>[] {
  const glance = async (method: string, path: string, json?: unknown) => {
    const res = await fetch(`${stack.url}/image${path}`, { method, headers: { 'X-Auth-Token': 'demo:demo', 'Content-Type': 'application/json' }, body: json === undefined ? undefined : JSON.stringify(json) });
    const text = await res.text();
    return { status: res.status, text, body: res.headers.get('content-type')?.includes('json') && text ? JSON.parse(text) : undefined };
  };
  return [
    {
      name: IMAGE_SCENARIOS[0]!,
      async setup() {
        const created = await glance('POST', '/v2/images', { name: 'crash-import', disk_format: 'raw', container_format: 'bare' });
        if (created.status !== 201) throw new Error(`POST /v2/images: ${created.status} ${created.text}`);
        return { image: created.body.id as string, uri: await sourceUrl() };
      },
      async start(f) {
        const res = await glance('POST', `/v2/images/${f.image}/import`, { method: { name: 'web-download', uri: f.uri } });
        if (res.status !== 202) throw new Error(`import: ${res.status} ${res.text}`);
        return res;
      },
      async outcome(f) {
        const image = await findImage(f.image);
        if (image?.status === 'active') return image.sizeBytes === BYTES.length ? 'finished' : undefined;
        // Back to queued: only with the import's task failed and nothing of it in the bucket.
        if (image?.status === 'queued' && image.importTask?.status === 'failure') return (await imageObjectExists(f.image)) ? undefined : 'rolled-back';
        return undefined;
      },
      async cleanup(f) {
        await glance('DELETE', `/v2/images/${f.image}`);
      },
    },
  ];
}

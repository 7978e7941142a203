/**
 * Glance's web-download import as a background operation (statemachines/image-import.asl.json) on
 * the embedded stack: the API answers 202 while a slow source is still sending, the image shows
 * importing then active; a second import meanwhile is Glance's 409; a source that fails ends the
 * image queued with the reason on its import task (GET /v2/images/{id}/tasks) and nothing in the
 * bucket; a delete during the download and a crash of the stack mid-download leave nothing behind;
 * a start Step Functions refuses gives the image back at once; the reconciler puts back an import
 * whose machine never started.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { SFNClient } from '@aws-sdk/client-sfn';
import { describeExecution, executionArnOf, setSfn } from '../../functions/core/executions.js';
import { IMAGE_IMPORT_MACHINE, imageImportExecutionName } from '../../functions/images/import-machine.js';
import { recoverStuckImports } from '../../functions/images/import-recovery.js';
import { beginImport } from '../../functions/images/import-task.js';
import { putImageObject } from '../../functions/servers/images.js';
import { imageObjectExists } from '../support/image-objects.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const DEMO = 'demo:demo';
const IMAGE = Buffer.from(Array.from({ length: 3 * 1024 * 1024 }, (_, i) => (i * 7) % 251));
const FIRST_PART = 64 * 1024;

let stack: TestLocalStack;
let base = '';
const source = createServer((req, res) => serve(req.url ?? '/', res));
/** GETs of each path so far. */
const requests = new Map<string, number>();
/** The slow path's responses wait here after their first part until the test opens it. */
let gate: { open(): void; opened: Promise<void> };
/** Slow responses that sent their whole body. */
let slowFinished = 0;
const savedPorts = process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS;
/** Where this file's downloads spool a body of unknown length (import-spool.ts). */
const spoolDir = mkdtempSync(join(tmpdir(), 'ferry-import-spool-'));

function closedGate(): typeof gate {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

function serve(path: string, res: ServerResponse): void {
  const n = (requests.get(path) ?? 0) + 1;
  requests.set(path, n);
  const headers = { 'Content-Length': String(IMAGE.length), 'Content-Type': 'application/octet-stream' };
  if (path === '/slow.img') {
    res.writeHead(200, headers);
    res.write(IMAGE.subarray(0, FIRST_PART));
    void gate.opened.then(() => {
      if (res.destroyed) return;
      res.end(IMAGE.subarray(FIRST_PART), () => slowFinished++);
    });
  } else if (path === '/cut.img') {
    // Every answer breaks off half-way: a source that keeps failing.
    res.writeHead(200, headers);
    res.write(IMAGE.subarray(0, IMAGE.length / 2), () => res.destroy());
  } else if (path === '/chunked.img') {
    // No Content-Length: Node sends the body chunked.
    res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
    res.write(IMAGE.subarray(0, FIRST_PART));
    res.end(IMAGE.subarray(FIRST_PART));
  } else if (path === '/gone-later.img' && n > 1) {
    res.writeHead(404).end();
  } else {
    res.writeHead(200, headers).end(IMAGE);
  }
}

beforeAll(async () => {
  await new Promise<void>((r) => source.listen(0, '127.0.0.1', r));
  const port = (source.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
  process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = `80,443,${port}`;
  process.env.FERRY_IMPORT_SPOOL_DIR = spoolDir;
  stack = await useLocalStack();
}, 120_000);
afterAll(async () => {
  gate?.open();
  await stack?.stop();
  source.closeAllConnections();
  await new Promise((r) => source.close(r));
  if (savedPorts === undefined) delete process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS;
  else process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = savedPorts;
  delete process.env.FERRY_IMPORT_SPOOL_DIR;
  rmSync(spoolDir, { recursive: true, force: true });
});

async function call(method: string, path: string, json?: unknown): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(stack.url + path, { method, headers: { 'X-Auth-Token': DEMO, ...(json === undefined ? {} : { 'Content-Type': 'application/json' }) }, body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  // Glance's errors are webob's plain text ("409 Conflict\n\n<message>").
  const parsed = res.headers.get('content-type')?.includes('json') && text ? JSON.parse(text) : undefined;
  return { status: res.status, body: parsed, text };
}

async function newImage(name: string): Promise<string> {
  const created = await call('POST', '/image/v2/images', { name, disk_format: 'raw', container_format: 'bare' });
  expect(created.status).toBe(201);
  return created.body.id as string;
}

const importFrom = (id: string, path: string) => call('POST', `/image/v2/images/${id}/import`, { method: { name: 'web-download', uri: base + path } });
const show = async (id: string) => (await call('GET', `/image/v2/images/${id}`)).body;
const tasks = async (id: string) => (await call('GET', `/image/v2/images/${id}/tasks`)).body.tasks as Record<string, any>[];

const becomes = (id: string, status: string, timeoutMs = 30_000) =>
  eventually(async (note) => {
    const image = await show(id);
    return note(image.status) === status ? image : undefined;
  }, `image ${id} ${status}`, timeoutMs);


const executionEnds = (taskId: string) =>
  eventually(async (note) => {
    const out = await describeExecution(executionArnOf(IMAGE_IMPORT_MACHINE, imageImportExecutionName(taskId)));
    return note(out.status) === 'RUNNING' ? undefined : out.status;
  }, `image-import ${taskId} to end`);

describe('web-download in the background', () => {
  test('202 while the source is still sending; importing (a second import 409), then active with the bytes', async () => {
    gate = closedGate();
    slowFinished = 0;
    const id = await newImage('slow');
    const answer = await importFrom(id, '/slow.img');
    expect(answer.status).toBe(202);
    // The API answered with the source still holding the rest of the body.
    expect(slowFinished).toBe(0);
    const importing = await show(id);
    const [task] = await tasks(id);
    expect(importing).toMatchObject({ status: 'importing', os_glance_import_task: task!.id, os_glance_importing_to_stores: '', os_glance_failed_import: '', size: null });
    expect(task).toMatchObject({ type: 'api_image_import', status: 'processing', image_id: id, input: { import_req: { method: { name: 'web-download', uri: `${base}/slow.img` } } } });
    // Glance's 409s while it runs: another import, an upload.
    expect(await importFrom(id, '/slow.img')).toMatchObject({ status: 409, text: expect.stringContaining("Image needs to be in 'queued' state to use 'web-download' method") });
    const put = await fetch(`${stack.url}/image/v2/images/${id}/file`, { method: 'PUT', headers: { 'X-Auth-Token': DEMO, 'Content-Type': 'application/octet-stream' }, body: IMAGE });
    expect(put.status).toBe(409);

    gate.open();
    const active = await becomes(id, 'active');
    expect(active).toMatchObject({ size: IMAGE.length, checksum: createHash('md5').update(IMAGE).digest('hex'), os_glance_importing_to_stores: '', os_glance_failed_import: '' });
    expect(active.os_glance_import_task).toBeUndefined();
    expect(await tasks(id)).toMatchObject([{ id: task!.id, status: 'success', result: { image_id: id }, message: '' }]);
    expect(await executionEnds(task!.id)).toBe('SUCCEEDED');
    const data = await fetch(`${stack.url}/image/v2/images/${id}/file`, { headers: { 'X-Auth-Token': DEMO } });
    expect(createHash('sha256').update(Buffer.from(await data.arrayBuffer())).digest('hex')).toBe(createHash('sha256').update(IMAGE).digest('hex'));
  }, 60_000);

  test('two imports of one queued image at once: one 202, the other 409, one task', async () => {
    gate = closedGate();
    const id = await newImage('race');
    const answers = await Promise.all([importFrom(id, '/slow.img'), importFrom(id, '/slow.img')]);
    expect(answers.map((a) => a.status).sort()).toEqual([202, 409]);
    gate.open();
    await becomes(id, 'active');
    expect(await tasks(id)).toHaveLength(1);
  }, 60_000);

  test('a source that keeps breaking off: retried, then queued with the reason, nothing in the bucket; a new import then succeeds', async () => {
    const id = await newImage('cut');
    const before = requests.get('/cut.img') ?? 0;
    expect((await importFrom(id, '/cut.img')).status).toBe(202);
    const queued = await becomes(id, 'queued');
    expect(queued).toMatchObject({ os_glance_failed_import: '', os_glance_importing_to_stores: '', size: null });
    expect(queued.os_glance_import_task).toBeUndefined();
    const [task] = await tasks(id);
    expect(task).toMatchObject({ status: 'failure', message: expect.stringContaining(`web-download of ${base}/cut.img failed`) });
    // The API's look, then the Download step and its 3 retries (ImportSourceUnavailable).
    expect((requests.get('/cut.img') ?? 0) - before).toBe(5);
    expect(await executionEnds(task!.id)).toBe('FAILED');
    expect(await imageObjectExists(id)).toBe(false);

    expect((await importFrom(id, '/fine.img')).status).toBe(202);
    await becomes(id, 'active');
    expect(await tasks(id)).toMatchObject([{ status: 'success' }]);
  }, 60_000);

  test('a source that refuses once the API looked (404): not retried, queued with HTTP 404', async () => {
    const id = await newImage('gone');
    expect((await importFrom(id, '/gone-later.img')).status).toBe(202);
    await becomes(id, 'queued');
    expect(await tasks(id)).toMatchObject([{ status: 'failure', message: `web-download of ${base}/gone-later.img failed: HTTP 404` }]);
    expect(requests.get('/gone-later.img')).toBe(2);
    expect(await imageObjectExists(id)).toBe(false);
  }, 60_000);

  test('a source with no Content-Length: spooled to a file, not memory; active with the bytes, the file removed', async () => {
    const id = await newImage('chunked');
    expect((await importFrom(id, '/chunked.img')).status).toBe(202);
    expect(await becomes(id, 'active')).toMatchObject({ size: IMAGE.length, checksum: createHash('md5').update(IMAGE).digest('hex') });
    expect(readdirSync(spoolDir)).toEqual([]);
  }, 60_000);

  test('a body of no Content-Length larger than the spool may hold: refused, not retried, queued with the reason; no object, no file', async () => {
    const id = await newImage('chunked-too-big');
    const before = requests.get('/chunked.img') ?? 0;
    process.env.FERRY_IMPORT_SPOOL_MAX_BYTES = String(1024 * 1024);
    try {
      expect((await importFrom(id, '/chunked.img')).status).toBe(202);
      await becomes(id, 'queued');
    } finally {
      delete process.env.FERRY_IMPORT_SPOOL_MAX_BYTES;
    }
    expect(await tasks(id)).toMatchObject([{ status: 'failure', message: expect.stringContaining('more than 1048576 bytes without a Content-Length') }]);
    // The API's look and one Download: a refusal is not retried.
    expect((requests.get('/chunked.img') ?? 0) - before).toBe(2);
    expect(await imageObjectExists(id)).toBe(false);
    expect(readdirSync(spoolDir)).toEqual([]);
  }, 60_000);

  test('an image deleted during its download: the compensation removes what the download stored', async () => {
    gate = closedGate();
    const id = await newImage('deleted-meanwhile');
    expect((await importFrom(id, '/slow.img')).status).toBe(202);
    const [task] = await tasks(id);
    expect((await call('DELETE', `/image/v2/images/${id}`)).status).toBe(204);
    gate.open();
    // The PUT ends after the delete; finishing finds no image, Failed removes the object.
    expect(await executionEnds(task!.id)).toBe('FAILED');
    expect(await imageObjectExists(id)).toBe(false);
    expect((await call('GET', `/image/v2/images/${id}`)).status).toBe(404);
  }, 60_000);
});

describe('a machine that cannot be started', () => {
  test('Step Functions refuses the start: 503, and the image is queued again with the reason', async () => {
    const id = await newImage('unstarted');
    setSfn({ send: async () => Promise.reject(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' })) } as unknown as SFNClient);
    try {
      expect((await importFrom(id, '/fine.img')).status).toBe(503);
    } finally {
      setSfn(undefined);
    }
    expect(await show(id)).toMatchObject({ status: 'queued' });
    expect(await tasks(id)).toMatchObject([{ status: 'failure', message: 'the import could not be started: Rate exceeded' }]);
    expect((await importFrom(id, '/fine.img')).status).toBe(202);
    await becomes(id, 'active');
  }, 60_000);
});

describe('crashes', () => {
  test('the stack stopped mid-download: the restart runs the import again, and it ends active', async () => {
    gate = closedGate();
    const id = await newImage('crash');
    const before = requests.get('/slow.img') ?? 0;
    expect((await importFrom(id, '/slow.img')).status).toBe(202);
    // The Download step holds the source's connection (the API's look was the first request).
    await eventually(() => (requests.get('/slow.img') ?? 0) - before >= 2, 'the download under way');
    await stack.restart();
    expect((await show(id)).status).toBe('importing');
    // The resumed execution's Download opens the source again.
    await eventually(() => (requests.get('/slow.img') ?? 0) - before >= 3, 'the download resumed');
    gate.open();
    expect(await becomes(id, 'active')).toMatchObject({ size: IMAGE.length, checksum: createHash('md5').update(IMAGE).digest('hex') });
  }, 90_000);

  test('an import whose machine never started: the reconciler puts it back to queued and removes what it stored', async () => {
    const id = await newImage('orphan');
    // The API's write, then a crash before StartExecution; bytes stored as by a Download cut short after its PUT.
    const task = await beginImport({ imageId: id, uri: `${base}/fine.img`, ownerProjectId: 'demo', userId: 'demo' });
    await putImageObject(id, IMAGE, IMAGE.length);
    expect(await recoverStuckImports({ before: new Date(Date.parse(task.createdAt) - 1000) })).toEqual([]);
    expect(await recoverStuckImports({ before: new Date(Date.now() + 1000) })).toEqual([{ imageId: id, taskId: task.id, action: 'failed', detail: expect.stringContaining('never started') }]);
    expect(await show(id)).toMatchObject({ status: 'queued' });
    expect(await tasks(id)).toMatchObject([{ status: 'failure', message: expect.stringContaining('never started') }]);
    expect(await imageObjectExists(id)).toBe(false);
    // Nothing is left for a second pass.
    expect(await recoverStuckImports({ before: new Date(Date.now() + 1000) })).toEqual([]);
  }, 60_000);
});

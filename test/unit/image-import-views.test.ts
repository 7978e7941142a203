/**
 * The pure parts of the web-download import: what Glance shows of an import on the image (its
 * lock while it runs, the store lists of a one-store Glance), the image's task as
 * `GET /v2/images/{id}/tasks` shows it (where a failure's reason is), and Glance's 409 messages
 * for an image that cannot be a target.
 */
import { describe, expect, test } from 'vitest';
import { importRefusal } from '../../functions/images/import-task.js';
import { imageTasksView, imageView } from '../../functions/images/views.js';
import type { Image, ImageImportTask } from '../../functions/servers/model.js';
import { imageFixture } from '../support/image-fixtures.js';

const task = (over: Partial<ImageImportTask> = {}): ImageImportTask => ({
  id: 't-1', status: 'processing', method: 'web-download', uri: 'https://example.org/a.img', message: '', ownerProjectId: 'demo', userId: 'demo',
  createdAt: '2026-11-27T17:00:00.123Z', updatedAt: '2026-11-27T17:00:01.5Z', ...over,
});
const image = (over: Partial<Image> = {}): Image => imageFixture({ objectKey: 'images/x', ...over });

describe('an import on the image', () => {
  test('never imported: no import properties, no task', () => {
    const view = imageView(image({ status: 'queued' }));
    expect(Object.keys(view).filter((k) => k.startsWith('os_glance'))).toEqual([]);
    expect(imageTasksView(image())).toEqual({ tasks: [] });
  });

  test('running: the lock names the task; the store lists are empty, as on a one-store Glance', () => {
    const view = imageView(image({ status: 'importing', importTask: task() }));
    expect(view).toMatchObject({ status: 'importing', os_glance_import_task: 't-1', os_glance_importing_to_stores: '', os_glance_failed_import: '', size: null, checksum: null });
    expect(imageTasksView(image({ importTask: task() })).tasks[0]).toMatchObject({ id: 't-1', type: 'api_image_import', status: 'processing', result: null, created_at: '2026-11-27T17:00:00.123000', updated_at: '2026-11-27T17:00:01.500000' });
  });

  test('failed: no lock; the reason is the task\'s message', () => {
    const failed = image({ status: 'queued', importTask: task({ status: 'failure', message: 'web-download of https://example.org/a.img failed: HTTP 404' }) });
    expect(imageView(failed).os_glance_import_task).toBeUndefined();
    expect(imageTasksView(failed).tasks[0]).toMatchObject({ status: 'failure', message: 'web-download of https://example.org/a.img failed: HTTP 404', input: { import_req: { method: { name: 'web-download', uri: 'https://example.org/a.img' } } } });
  });

  test('succeeded: the result names the image', () => {
    const done = image({ id: 'img-1', status: 'active', importTask: task({ status: 'success' }) });
    expect(imageTasksView(done).tasks[0]).toMatchObject({ status: 'success', result: { image_id: 'img-1' } });
  });
});

describe('Glance\'s refusals of an import target', () => {
  test.each([
    ['active', 'Image with status active cannot be target for import'],
    ['importing', "Image needs to be in 'queued' state to use 'web-download' method"],
    ['saving', "Image needs to be in 'queued' state to use 'web-download' method"],
  ] as const)('%s: 409 %s', (status, message) => {
    const e = importRefusal(image({ status }));
    expect(e).toMatchObject({ status: 409, message });
  });
});

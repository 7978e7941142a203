/**
 * An image record as functions/servers/images.ts stores it, for tests of the image API's pure parts
 * and of its routes against mocked clients: a queued private image of project demo, with `over`.
 */
import type { Image } from '../../functions/servers/model.js';

export const IMAGE_ID = '0b3f4c6e-1d2a-4f5b-8c7d-9e0f1a2b3c4d';

export function imageFixture(over: Partial<Image> = {}): Image {
  const id = over.id ?? IMAGE_ID;
  return {
    id,
    name: 'img',
    status: 'queued',
    sizeBytes: 0,
    minDisk: 0,
    minRam: 0,
    diskFormat: 'raw',
    containerFormat: 'bare',
    visibility: 'private',
    ownerProjectId: 'demo',
    properties: {},
    objectKey: `images/${id}`,
    sha256: null,
    createdAt: '2026-01-01T00:00:00.000Z',
    updatedAt: '2026-01-01T00:00:00.000Z',
    ...over,
  };
}

/**
 * The ImageSources port of volumes (volumes/sources.ts), answered by the image store Ferry keeps
 * for Nova and Glance (images.ts): what a volume created from an image (`imageRef`) needs of it.
 * The entry points that can create volumes (the Cinder API, Nova's /os-volumes) register it.
 */
import { NotFound } from '../core/errors.js';
import { registerImageSources, type ImageSources } from '../volumes/sources.js';
import { findImage } from './images.js';

export const IMAGE_SOURCES: ImageSources = {
  async getImageScoped(auth, id) {
    const i = await findImage(id);
    // As the image listing: public ones and the project's own (all for an admin); a deleted one is gone.
    if (!i || i.status === 'deleted' || !(auth.isAdmin || i.visibility === 'public' || i.ownerProjectId === auth.projectId)) {
      throw new NotFound(`Image ${id} could not be found.`);
    }
    return { id: i.id, name: i.name, status: i.status, sizeBytes: i.sizeBytes, minDisk: i.minDisk, diskFormat: i.diskFormat, containerFormat: i.containerFormat, objectKey: i.objectKey };
  },
};

export function registerImagesAsVolumeSources(): void {
  registerImageSources(IMAGE_SOURCES);
}

/**
 * The SnapshotSources port of volumes (volumes/sources.ts), answered by this capability: what a
 * volume created from a snapshot needs of it. Every entry point that can create a volume (the
 * Cinder API, and the Nova API's /os-volumes proxy) registers it when it loads.
 */
import { registerSnapshotSources, type SnapshotSources } from '../volumes/sources.js';
import { snapshotKey } from './model.js';
import { getSnapshotScoped } from './repo.js';

export const SNAPSHOT_SOURCES: SnapshotSources = {
  async getSnapshotScoped(auth, id) {
    const s = await getSnapshotScoped(auth, id);
    return { id: s.id, volumeId: s.volumeId, projectId: s.projectId, status: s.status, size: s.size, backendHost: s.backendHost, volumeBackendName: s.volumeBackendName, backendName: s.backendName, key: snapshotKey(s.id) };
  },
};

export function registerSnapshotsAsVolumeSources(): void {
  registerSnapshotSources(SNAPSHOT_SOURCES);
}

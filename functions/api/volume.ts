/**
 * The Cinder v3 REST API (volume-api in functions/wiring.ts): version discovery, volumes, volume
 * types, manageable volumes, the attachments API, snapshots, and replication v2.1 (os-services
 * failover/freeze/thaw, capabilities, scheduler stats).
 */
import { registerAttachmentUsers } from '../attachments/ports.js';
import { attachmentRoutes } from '../attachments/routes.js';
import { createApiHandler } from '../core/api.js';
import { replicationRoutes } from '../replication/routes.js';
import { attachmentInUseByServer } from '../servers/repo.js';
import { snapshotRoutes } from '../snapshots/routes.js';
import { VOLUME_VERSIONS } from '../core/microversion.js';
import { manageRoutes } from '../volumes/manage.js';
import { volumeRoutes } from '../volumes/routes.js';
import { typeRoutes } from '../volumes/type-routes.js';
import { versionRoutes, type VersionInfo } from './versions.js';

// Cinder asks Nova whether a server still uses an attachment before a non-service user deletes it.
registerAttachmentUsers({ attachmentInUseByServer });

export const VOLUME_VERSION_INFO: VersionInfo = {
  service: VOLUME_VERSIONS,
  id: 'v3.0',
  versionPath: '/v3',
  updated: '2022-08-31T00:00:00Z',
  mediaType: 'application/vnd.openstack.volume+json;version=3',
};

export const handler = createApiHandler({
  service: VOLUME_VERSIONS,
  rootPath: '/volume',
  versionPath: '/v3',
  routes: [...volumeRoutes, ...typeRoutes, ...manageRoutes, ...attachmentRoutes, ...snapshotRoutes, ...replicationRoutes],
  unversioned: versionRoutes(VOLUME_VERSION_INFO),
});

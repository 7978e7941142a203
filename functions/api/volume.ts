/**
 * The Cinder v3 REST API (volume-api in functions/wiring.ts): version discovery, volumes, volume
 * types, qos specs, manageable volumes, the attachments API, snapshots, and replication v2.1 (os-services
 * failover/freeze/thaw, capabilities, scheduler stats).
 */
import { registerAttachmentUsers } from '../attachments/ports.js';
import { LEGACY_ATTACH_ACTIONS } from '../attachments/legacy.js';
import { attachmentRoutes } from '../attachments/routes.js';
import { createApiHandler } from '../core/api.js';
import { hostRoutes } from '../replication/hosts-routes.js';
import { replicationRoutes } from '../replication/routes.js';
import { SERVER_ATTACHMENT_USERS } from '../servers/attachment-users.js';
import { snapshotMetadataRoutes } from '../snapshots/metadata.js';
import { snapshotRoutes } from '../snapshots/routes.js';
import { transferRoutes } from '../transfers/routes.js';
import { registerSnapshotsAsVolumeSources } from '../snapshots/sources.js';
import { registerImagesAsVolumeSources } from '../servers/volume-image-sources.js';
import { VOLUME_VERSIONS } from '../core/microversion.js';
import { registerVolumeActions } from '../volumes/actions.js';
import { manageRoutes } from '../volumes/manage.js';
import { qosRoutes } from '../volumes/qos-routes.js';
import { volumeRoutes } from '../volumes/routes.js';
import { typeRoutes } from '../volumes/type-routes.js';
import { typeAccessRoutes } from '../volumes/type-access.js';
import { quotaRoutes } from '../volumes/quota-routes.js';
import { limitsRoutes } from '../volumes/limits-routes.js';
import { extensionRoutes } from '../volumes/extensions-routes.js';
import { cinderMessageRoutes } from '../messages/routes.js';
import { versionRoutes, type VersionInfo } from './versions.js';

// Cinder asks Nova whether a server still uses an attachment before a non-service user deletes it.
registerAttachmentUsers(SERVER_ATTACHMENT_USERS);
// A volume from a snapshot reads the snapshot through a port (volumes sit below snapshots).
registerSnapshotsAsVolumeSources();
// ... and an image (imageRef) through another: the image store is the servers'.
registerImagesAsVolumeSources();
// The pre-3.27 attach actions (os-reserve, os-attach, ...) are attachments (functions/attachments/legacy.ts).
registerVolumeActions(LEGACY_ATTACH_ACTIONS);

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
  routes: [...volumeRoutes, ...typeRoutes, ...typeAccessRoutes, ...qosRoutes, ...manageRoutes, ...attachmentRoutes, ...snapshotRoutes, ...snapshotMetadataRoutes, ...transferRoutes, ...replicationRoutes, ...hostRoutes, ...quotaRoutes, ...limitsRoutes, ...extensionRoutes, ...cinderMessageRoutes],
  unversioned: versionRoutes(VOLUME_VERSION_INFO),
});

/** Volume aggregates and driver results for the attachment unit tests (not a test file itself). */
import type { ConnectionProperties, Connector } from '../../functions/drivers/volume/driver.js';
import type { Volume } from '../../functions/volumes/model.js';

export const VOLUME_ID = '22222222-2222-2222-2222-222222222222';
export const INSTANCE_A = '44444444-4444-4444-4444-444444444444';
export const INSTANCE_B = '55555555-5555-5555-5555-555555555555';
export const T0 = '2026-01-02T03:04:05.678Z';
export const T1 = '2026-01-02T03:04:06.000Z';

export function volumeFixture(overrides: Partial<Volume> = {}): Volume {
  return {
    id: VOLUME_ID,
    projectId: 'demo',
    userId: 'demo',
    name: 'v1',
    description: null,
    size: 1,
    status: 'available',
    attachStatus: 'detached',
    previousStatus: null,
    migrationStatus: null,
    replicationStatus: null,
    volumeTypeId: 'type-1',
    volumeTypeName: 'default',
    multiattach: false,
    bootable: false,
    host: 'ferry@lvm-a#pool0',
    backendName: `volume-${VOLUME_ID}`,
    providerLocation: null,
    serviceUuid: null,
    sharedTargets: false,
    availabilityZone: 'nova',
    metadata: {},
    adminMetadata: {},
    attachments: {},
    instances: {},
    connections: {},
    createdAt: T0,
    updatedAt: T0,
    version: 3,
    ...overrides,
  };
}

export const connectorFor = (host: string, extra: Partial<Connector> = {}): Connector => ({
  initiator: 'iqn.x',
  ip: '10.0.0.5',
  platform: 'x86_64',
  host,
  os_type: 'linux2',
  multipath: false,
  mountpoint: null,
  ...extra,
});

export const localConnection = (host: string): ConnectionProperties => ({
  driverVolumeType: 'local',
  data: { device_path: `/tmp/b/.connections/${host}/volume-${VOLUME_ID}`, target_lun: 0, host },
});

/**
 * What the Cinder API handler (functions/api/volume.ts) registers when it loads: the attachments
 * port answered by the servers' records. Tests that call the attachments service directly, without
 * loading an entry point, call this first.
 */
export async function registerServerAttachmentUsers(): Promise<void> {
  const [{ registerAttachmentUsers }, { SERVER_ATTACHMENT_USERS }] = await Promise.all([
    import('../../functions/attachments/ports.js'),
    import('../../functions/servers/attachment-users.js'),
  ]);
  registerAttachmentUsers(SERVER_ATTACHMENT_USERS);
}

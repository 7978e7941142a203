/**
 * `GET /extensions` (C/api/extensions.py ExtensionsResource.index): the API extensions this Cinder
 * serves, each as upstream's contrib module names it (name, alias, its docstring as description,
 * its `updated`). Only what Ferry implements is listed, so a client that checks for an extension
 * before using it (Tempest's `api_extensions`) finds the truth. Any authenticated caller may list.
 */
import { json, type RouteSpec } from '../core/api.js';
import { registerPolicies } from '../core/policy.js';

const POLICY = 'volume:extensions';
registerPolicies({ [POLICY]: '@' });

/** [name, alias, description, updated] of the contrib extensions whose routes or attributes Ferry serves. */
const EXTENSIONS: readonly (readonly [string, string, string, string])[] = [
  ['AdminActions', 'os-admin-actions', 'Enable admin actions.', '2012-08-25T00:00:00+00:00'],
  ['AvailabilityZones', 'os-availability-zone', 'Describe Availability Zones.', '2013-06-27T00:00:00+00:00'],
  ['Capabilities', 'capabilities', 'Capabilities support.', '2015-08-31T00:00:00+00:00'],
  ['Hosts', 'os-hosts', 'Admin-only host administration.', '2011-06-29T00:00:00+00:00'],
  ['Qos_specs_manage', 'qos-specs', 'QoS specs support.', '2013-08-02T00:00:00+00:00'],
  ['QuotaClasses', 'os-quota-class-sets', 'Quota classes management support.', '2012-03-12T00:00:00+00:00'],
  ['Quotas', 'os-quota-sets', 'Quota management support.', '2011-08-08T00:00:00+00:00'],
  ['SchedulerStats', 'scheduler-stats', 'Scheduler stats support.', '2014-09-07T00:00:00+00:00'],
  ['Services', 'os-services', 'Services support.', '2012-10-28T00:00:00-00:00'],
  ['SnapshotActions', 'os-snapshot-actions', 'Enable snapshot manager actions.', '2013-07-16T00:00:00+00:00'],
  ['SnapshotUnmanage', 'os-snapshot-unmanage', 'Enable volume unmanage operation.', '2014-12-31T00:00:00+00:00'],
  ['Types_extra_specs', 'os-types-extra-specs', 'Type extra specs support.', '2011-08-24T00:00:00+00:00'],
  ['Types_manage', 'os-types-manage', 'Types manage support.', '2011-08-24T00:00:00+00:00'],
  ['UsedLimits', 'os-used-limits', 'Provide data on limited resources that are being used.', '2013-10-03T00:00:00+00:00'],
  ['VolumeActions', 'os-volume-actions', 'Enable volume actions.', '2012-05-31T00:00:00+00:00'],
  ['VolumeHostAttribute', 'os-vol-host-attr', 'Expose host as an attribute of a volume.', '2011-11-03T00:00:00+00:00'],
  ['VolumeImageMetadata', 'os-vol-image-meta', 'Show image metadata associated with the volume.', '2012-12-07T00:00:00+00:00'],
  ['VolumeManage', 'os-volume-manage', 'Allows existing backend storage to be \'managed\' by Cinder.', '2014-02-10T00:00:00+00:00'],
  ['VolumeTenantAttribute', 'os-vol-tenant-attr', 'Expose the internal project_id as an attribute of a volume.', '2011-11-03T00:00:00+00:00'],
  ['VolumeTransfer', 'os-volume-transfer', 'Volume transfer management support.', '2013-05-29T00:00:00+00:00'],
  ['VolumeTypeAccess', 'os-volume-type-access', 'Volume type access support.', '2014-06-26T00:00:00Z'],
  ['VolumeUnmanage', 'os-volume-unmanage', 'Enable volume unmanage operation.', '2012-05-31T00:00:00+00:00'],
];

export const EXTENSION_ALIASES: readonly string[] = EXTENSIONS.map(([, alias]) => alias);

export const extensionRoutes: RouteSpec[] = [
  {
    method: 'GET',
    path: '/extensions',
    action: POLICY,
    handler: async () => json(200, { extensions: EXTENSIONS.map(([name, alias, description, updated]) => ({ name, alias, description, updated, links: [] })) }),
  },
];

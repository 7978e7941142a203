/**
 * Fixtures of the Nova view builder tests (test/unit/server-views-*.test.ts): a microversion by
 * its string, the request contexts (with and without the URL project), an instance, a block device
 * mapping, a port and addresses as the views receive them, the admin and non-admin callers.
 */
import { createHash } from 'node:crypto';
import { ApiVersion } from '../../functions/core/microversion.js';
import type { BlockDeviceMapping, Instance, Port } from '../../functions/servers/model.js';
import type { ServerDetailExtra } from '../../functions/servers/views.js';

export const v = (s: string) => new ApiVersion(2, Number(s.split('.')[1]));
export const CTX = { baseUrl: 'http://h/compute/v2.1' };
export const CTX_P = { baseUrl: 'http://h/compute/v2.1', urlProjectId: 'p1' };
export const UUID = '0e12087a-7c87-476a-8f84-7398e991cecc';
export const IMAGE = '70a599e0-31e7-49b7-b260-868f441e862b';
export const VOL = '9a1c0e4b-3f6d-4a8e-9b2c-1d2e3f4a5b6c';

export function instance(over: Partial<Instance> = {}): Instance {
  return {
    uuid: UUID,
    name: 'My Server_1.test',
    projectId: 'proj1',
    userId: 'user1',
    flavor: { flavorid: '1', id: 1, name: 'm1.tiny', vcpus: 1, memoryMb: 512, rootGb: 1, ephemeralGb: 0, swap: 0, extraSpecs: { 'hw:cpu_policy': 'shared' } },
    oldFlavor: null,
    newFlavor: null,
    imageRef: IMAGE,
    host: 'cmp1',
    node: 'cmp1.node',
    availabilityZone: null,
    vmState: 'active',
    taskState: null,
    powerState: 1,
    progress: 0,
    metadata: { k: 'v' },
    keyName: null,
    systemMetadata: {},
    hidden: false,
    locked: false,
    fault: null,
    operation: null,
    launchedAt: '2019-04-23T15:19:10.855Z',
    terminatedAt: null,
    createdAt: '2019-04-23T15:19:09.123Z',
    updatedAt: '2019-04-23T15:19:11.000Z',
    version: 1,
    ...over,
  };
}

export function bdm(over: Partial<BlockDeviceMapping> = {}): BlockDeviceMapping {
  return {
    uuid: 'b0000000-0000-4000-8000-000000000001',
    instanceUuid: UUID,
    sourceType: 'volume',
    destinationType: 'volume',
    volumeId: VOL,
    imageId: null,
    bootIndex: null,
    deviceName: '/dev/vdb',
    attachmentId: 'a0000000-0000-4000-8000-000000000001',
    connectionInfo: null,
    deleteOnTermination: true,
    tag: 'data',
    volumeSize: 1,
    createdAt: '2019-04-23T15:19:09.000Z',
    updatedAt: '2019-04-23T15:19:09.000Z',
    ...over,
  };
}

export const port: Port = {
  id: 'port1', networkId: 'net1', macAddress: 'fa:16:3e:00:00:01', fixedIps: [{ ipAddress: '10.0.0.5', subnetId: 's1' }], deviceId: UUID, deviceOwner: 'compute:nova',
  projectId: 'proj1', bindingHostId: 'cmp1', bindings: {}, status: 'ACTIVE', createdAt: '2019-04-23T15:19:09.000Z', updatedAt: '2019-04-23T15:19:09.000Z',
};
export const ADDRS = { private: [{ addr: '10.0.0.5', version: 4, 'OS-EXT-IPS:type': 'fixed', 'OS-EXT-IPS-MAC:mac_addr': 'fa:16:3e:00:00:01' }] };
export const extra = (over: Partial<ServerDetailExtra> = {}): ServerDetailExtra => ({ bdms: [bdm()], ports: [port], addresses: ADDRS, ...over });
export const ADMIN = { isAdmin: true };
export const USER = { isAdmin: false };
export const sha224 = (s: string) => createHash('sha224').update(s).digest('hex');

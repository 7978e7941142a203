/**
 * The inventory: one declarative document naming everything a Ferry deployment moves things
 * between — volume backends and types, share backends and types, projects, cells with their
 * hosts, flavors, networks and images. `ferry inventory apply FILE`, `npm start` (the sandbox,
 * inventories/sandbox.yaml) and `cdk deploy -c inventory=FILE` all validate it here first, so a
 * mistake is reported with its path in the document before anything is written.
 *
 * Relative `root` paths (local drivers) are relative to the stack's data directory; the caller
 * resolves them (`resolveRoots`) before planning.
 */
import { isAbsolute, join } from 'node:path';
import { z } from 'zod';
import { BadRequest, ConfigurationError } from '../core/errors.js';
import { awsEfsShareBackend } from '../drivers/share/aws-efs-sdk.js';

const name = z.string().min(1).max(255);
/** `host@backend`, as Cinder and Manila name a backend service. */
const backendHost = z.string().regex(/^[^@#\s]+@[^@#\s]+$/, 'must be host@backend (no #pool, no spaces)');
const uuid = z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'must be a lowercase uuid');
const pools = z.array(z.object({ name, totalCapacityGb: z.number().int().positive() }).strict()).min(1);
const specs = z.record(z.string(), z.string());

const volumeCommon = {
  host: backendHost,
  volumeBackendName: name,
  pools,
  /** Stable `service_uuid`; derived from the host when absent. */
  serviceUuid: uuid.optional(),
};

export const VolumeBackendSchema = z.discriminatedUnion('driver', [
  z
    .object({
      ...volumeCommon,
      driver: z.literal('local'),
      root: z.string().min(1),
      replicationDevices: z.array(z.object({ backend_id: name.refine((v) => v !== 'default', 'default means fail back; name a target otherwise'), root: z.string().min(1) }).strict()).optional(),
    })
    .strict(),
  z
    .object({
      ...volumeCommon,
      driver: z.literal('aws-ebs'),
      availabilityZone: z.string().regex(/^[a-z]{2}(-[a-z]+)+-\d[a-z]$/, 'must be an availability zone such as eu-west-1a'),
      ebsVolumeType: z.enum(['gp2', 'gp3', 'io1', 'io2', 'st1', 'sc1', 'standard']).optional(),
      /** io1/io2: IOPS provisioned per GiB (the driver keeps within each type's range; default 50). */
      ebsIopsPerGb: z.number().int().positive().max(1000).optional(),
      /** Replication targets: zones in other regions (aws-ebs-replication.ts). */
      replicationDevices: z
        .array(
          z
            .object({
              backend_id: name.refine((v) => v !== 'default', 'default means fail back; name a target otherwise'),
              availability_zone: z.string().regex(/^[a-z]{2}(-[a-z]+)+-\d[a-z]$/, 'must be an availability zone such as eu-central-1a'),
            })
            .strict(),
        )
        .optional(),
    })
    .strict(),
]);

const shareCommon = {
  host: backendHost,
  pools,
  shareBackendName: name,
  availabilityZone: z.string().optional(),
};

/**
 * A share backend: the local kinds keep shares as directories under `root`; `aws-efs` makes an EFS
 * file system per share in `region`, with mount targets in `subnetIds` of `vpcId` (what
 * functions/drivers/share/aws-efs-sdk.ts awsEfsShareBackend checks, which parseInventory runs too).
 */
export const ShareBackendSchema = z.discriminatedUnion('driver', [
  z.object({ ...shareCommon, driver: z.enum(['local-a', 'local-b']), root: z.string().min(1), protocols: z.array(z.enum(['NFS', 'CIFS'])).min(1) }).strict(),
  z
    .object({
      ...shareCommon,
      driver: z.literal('aws-efs'),
      /** EFS exports NFS only. */
      protocols: z.array(z.literal('NFS')).min(1).default(['NFS']),
      region: z.string(),
      vpcId: z.string(),
      /** One subnet per availability zone the shares are mounted from. */
      subnetIds: z.array(z.string()).min(1),
      performanceMode: z.enum(['generalPurpose', 'maxIO']).optional(),
      throughputMode: z.enum(['elastic', 'bursting']).optional(),
    })
    .strict(),
]);

const TypeSchema = z.object({ name, description: z.string().max(255).nullable().optional(), isPublic: z.boolean().optional(), extraSpecs: specs.optional() }).strict();

export const HostSchema = z
  .object({
    host: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'must be one path component (letters, digits, . _ -)'),
    driver: z.literal('local'),
    root: z.string().min(1),
    vcpus: z.number().int().positive(),
    memoryMb: z.number().int().positive(),
    diskGb: z.number().int().positive(),
  })
  .strict();

export const CellSchema = z
  .object({
    name,
    /** The cell's DynamoDB table: one of the cell tables the stack has. */
    table: z.enum(['cell1', 'cell2']),
    /** The hardware generation of its hosts: a flavor's `hw:generation` fits only hosts of its generation. */
    generation: z.number().int().positive(),
    control: z.array(z.object({ host: name, binary: z.enum(['nova-scheduler', 'nova-conductor']) }).strict()).default([]),
    hosts: z.array(HostSchema).default([]),
  })
  .strict();

export const FlavorSchema = z
  .object({
    id: z.string().regex(/^[A-Za-z0-9._-]{1,255}$/),
    name,
    vcpus: z.number().int().positive(),
    memoryMb: z.number().int().positive(),
    rootGb: z.number().int().min(0),
    ephemeralGb: z.number().int().min(0).default(0),
    swapMb: z.number().int().min(0).default(0),
    isPublic: z.boolean().default(true),
    description: z.string().max(65535).nullable().optional(),
    extraSpecs: specs.default({}),
  })
  .strict();

export const NetworkSchema = z.object({ name, cidr: z.string().regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, 'must be an IPv4 CIDR') }).strict();

/** An image: generated deterministic bytes of a size (sandboxes and tests), with a stable id. */
export const ImageSchema = z.object({ name, sizeBytes: z.number().int().positive().max(1024 ** 3) }).strict();

export const InventorySchema = z
  .object({
    projects: z.array(name).default([]),
    volumeBackends: z.array(VolumeBackendSchema).default([]),
    volumeTypes: z.array(TypeSchema).default([]),
    shareBackends: z.array(ShareBackendSchema).default([]),
    shareTypes: z.array(TypeSchema).default([]),
    cells: z.array(CellSchema).default([]),
    flavors: z.array(FlavorSchema).default([]),
    networks: z.array(NetworkSchema).default([]),
    images: z.array(ImageSchema).default([]),
  })
  .strict();

export type Inventory = z.infer<typeof InventorySchema>;
export type VolumeBackendEntry = z.infer<typeof VolumeBackendSchema>;
export type ShareBackendEntry = z.infer<typeof ShareBackendSchema>;
export type TypeEntry = z.infer<typeof TypeSchema>;
export type CellEntry = z.infer<typeof CellSchema>;
export type HostEntry = z.infer<typeof HostSchema>;
export type FlavorEntry = z.infer<typeof FlavorSchema>;
export type NetworkEntry = z.infer<typeof NetworkSchema>;
export type ImageEntry = z.infer<typeof ImageSchema>;

/** Where the inventory is applied: `aws` refuses what cannot work in a Lambda (a local volume or compute driver writes into one function's /tmp). */
export type InventoryTarget = 'local' | 'aws';

/** The share storage mount of the AWS functions (infra/aws/copy-worker.ts): share roots on AWS live under it. */
export const AWS_SHARE_MOUNT = '/mnt/ferry-shares';

const duplicates = (values: string[]) => values.filter((v, i) => values.indexOf(v) !== i);

/** Parses and checks a document; a BadRequest lists every problem with its path. */
export function parseInventory(document: unknown, target: InventoryTarget): Inventory {
  const parsed = InventorySchema.safeParse(document ?? {});
  if (!parsed.success) {
    throw new BadRequest(`Invalid inventory: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(document)'}: ${i.message}`).join('; ')}`);
  }
  const inv = parsed.data;
  const problems: string[] = [];
  const unique = (what: string, values: string[]) => {
    for (const d of new Set(duplicates(values))) problems.push(`${what} ${d} appears more than once`);
  };
  unique('volume backend', inv.volumeBackends.map((b) => b.host));
  unique('volume type', inv.volumeTypes.map((t) => t.name));
  unique('share backend', inv.shareBackends.map((b) => b.host));
  unique('share type', inv.shareTypes.map((t) => t.name));
  unique('cell', inv.cells.map((c) => c.name));
  unique('cell table', inv.cells.map((c) => c.table));
  unique('compute host', inv.cells.flatMap((c) => c.hosts.map((h) => h.host)));
  unique('flavor id', inv.flavors.map((f) => f.id));
  unique('flavor name', inv.flavors.map((f) => f.name));
  unique('network', inv.networks.map((n) => n.name));
  unique('image', inv.images.map((i) => i.name));
  unique('project', inv.projects);
  for (const b of inv.volumeBackends) unique(`pool of ${b.host}:`, b.pools.map((p) => p.name));
  for (const b of inv.shareBackends) unique(`pool of ${b.host}:`, b.pools.map((p) => p.name));
  for (const b of inv.volumeBackends) {
    if (b.driver !== 'aws-ebs') continue;
    unique(`replication_device of ${b.host}:`, (b.replicationDevices ?? []).map((d) => d.backend_id));
    const region = b.availabilityZone.replace(/[a-z]$/, '');
    for (const d of b.replicationDevices ?? []) {
      if (d.availability_zone.replace(/[a-z]$/, '') === region) problems.push(`volume backend ${b.host}: replication_device ${d.backend_id} is in ${region}, the backend's own region; an EBS target is another region`);
    }
  }
  for (const b of inv.shareBackends) {
    if (b.driver !== 'aws-efs') continue;
    // The driver's own check of its record (region, VPC and subnet ids, the modes EFS allows together).
    try {
      awsEfsShareBackend(b);
    } catch (e) {
      if (!(e instanceof ConfigurationError)) throw e;
      problems.push(e.message);
    }
  }
  if (target === 'aws') {
    for (const b of inv.volumeBackends) if (b.driver === 'local') problems.push(`volume backend ${b.host}: driver local keeps volumes in one Lambda's /tmp; on AWS use aws-ebs`);
    for (const c of inv.cells) for (const h of c.hosts) problems.push(`cell ${c.name} host ${h.host}: driver local runs guests in one Lambda's /tmp; Ferry has no AWS compute driver yet`);
    for (const b of inv.shareBackends) {
      if (b.driver === 'aws-efs') continue;
      if (!isAbsolute(b.root) || !(b.root === AWS_SHARE_MOUNT || b.root.startsWith(`${AWS_SHARE_MOUNT}/`))) problems.push(`share backend ${b.host}: root must be under ${AWS_SHARE_MOUNT} (the share storage the functions mount), not ${b.root}`);
    }
  }
  if (problems.length) throw new BadRequest(`Invalid inventory: ${problems.join('; ')}`);
  return inv;
}

/** The inventory with every relative `root` made absolute under `dataDir` (the local stack's). */
export function resolveRoots(inv: Inventory, dataDir: string): Inventory {
  const at = (p: string) => (isAbsolute(p) ? p : join(dataDir, p));
  return {
    ...inv,
    volumeBackends: inv.volumeBackends.map((b) =>
      b.driver === 'local' ? { ...b, root: at(b.root), ...(b.replicationDevices ? { replicationDevices: b.replicationDevices.map((d) => ({ ...d, root: at(d.root) })) } : {}) } : b,
    ),
    shareBackends: inv.shareBackends.map((b) => (b.driver === 'aws-efs' ? b : { ...b, root: at(b.root) })),
    cells: inv.cells.map((c) => ({ ...c, hosts: c.hosts.map((h) => ({ ...h, root: at(h.root) })) })),
  };
}

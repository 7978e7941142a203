/**
 * What the local stack seeds on every start (each seed is idempotent, so a restart changes
 * nothing): the volume backends and types, the share backends and type, the compute cells, hosts,
 * services, flavors, network and images (in S3).
 */
import { seedComputeSandbox } from '../../functions/compute/seed.js';
import { seedImages } from '../../functions/servers/images.js';
import { seedShareSandbox } from '../../functions/shares/seed.js';
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';

export async function seedSandbox(dataDir: string): Promise<void> {
  await seedVolumeSandbox({ dataDir });
  await seedShareSandbox({ dataDir });
  await seedComputeSandbox({ dataDir });
  await seedImages();
}

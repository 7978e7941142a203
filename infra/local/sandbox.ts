/**
 * What the local stack seeds on every start (each seed is idempotent, so a restart changes
 * nothing): the volume backends and types today; share and compute seeds join here.
 */
import { seedVolumeSandbox } from '../../functions/volumes/seed.js';

export async function seedSandbox(dataDir: string): Promise<void> {
  await seedVolumeSandbox({ dataDir });
}

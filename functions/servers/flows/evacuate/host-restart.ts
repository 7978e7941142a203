/**
 * An evacuated host comes back: Nova's `_destroy_evacuated_instances` on compute restart. The
 * compute API's os-services update calls it through the ComputeHostRestart port
 * (compute/ports.ts), which the Nova API handler fills with this.
 */
import { logger } from '../../../core/logger.js';
import { driverOfHost } from '../../engine.js';
import { listMigrations, updateMigration } from '../../migrations.js';
import { findServer } from '../../repo.js';

/**
 * Nova's `_destroy_evacuated_instances` when the compute service on `host` starts again: every
 * guest still defined (or kept) there whose instance now lives elsewhere after a `done` evacuation
 * from this host is destroyed, and that migration becomes `completed`. No Cinder calls: the
 * attachments were switched during the evacuation. Returns the uuids destroyed.
 */
export async function cleanupEvacuatedGuests(host: string): Promise<string[]> {
  const driver = await driverOfHost(host);
  const guests = [...(await driver.listGuests()), ...(await driver.listKeptDisks())];
  if (!guests.length) return [];
  const evacuations = (await listMigrations()).filter(({ migration: m }) => m.migrationType === 'evacuation' && m.status === 'done' && m.sourceCompute === host);
  const destroyed: string[] = [];
  for (const uuid of new Set(guests.map((g) => g.uuid))) {
    const mine = evacuations.filter(({ migration }) => migration.instanceUuid === uuid);
    if (!mine.length) continue;
    const server = await findServer(uuid);
    if (server && server.instance.host === host) continue; // evacuated back here since: the guest is the live one
    await driver.destroy(uuid);
    destroyed.push(uuid);
    for (const { cell, migration } of mine) await updateMigration(cell, migration.uuid, { status: 'completed' });
    logger.info('destroyed an evacuated guest on its old host', { host, serverId: uuid });
  }
  return destroyed;
}

/**
 * Waits of the e2e tests that drive volumes through a CLI (cinder, openstack), over the volume API:
 * a poll is a fetch, where a `cinder show` poll starts a Python interpreter (~1 CPU s). The tests
 * then run the CLI once for the state they check, so what the CLI prints is still what is asserted.
 */
import { eventually } from './poll.js';

/** GET `<url>/volume/v3<path>` with a noauth `user:project` token; the parsed body, or undefined on 404. */
async function getJson(url: string, token: string, path: string): Promise<any> {
  const res = await fetch(`${url}/volume/v3${path}`, { headers: { Accept: 'application/json', 'X-Auth-Token': token, 'OpenStack-API-Version': 'volume 3.70' } });
  const text = await res.text();
  if (res.status === 404) return undefined;
  if (res.status !== 200) throw new Error(`GET ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** Until the volume's status is `status`; fails at once on an error status. */
export async function volumeStatusBecomes(url: string, token: string, id: string, status: string, timeoutMs = 60_000): Promise<void> {
  await eventually(async (note) => {
    const seen = note((await getJson(url, token, `/volumes/${id}`))?.volume?.status as string | undefined);
    if (seen?.startsWith('error') && !status.startsWith('error')) throw new Error(`volume ${id} went to ${seen}`);
    return seen === status || undefined;
  }, `volume ${id} to reach ${status}`, { timeoutMs, intervalMs: 100 });
}

/** Until the volume is gone (404). */
export async function volumeGone(url: string, token: string, id: string, timeoutMs = 40_000): Promise<void> {
  await eventually(async (note) => note(await getJson(url, token, `/volumes/${id}`)) === undefined || undefined, `volume ${id} to be deleted`, { timeoutMs, intervalMs: 100 });
}

/** Until the cinder-volume service of `host` has this replication_status (as the admin); fails at once on failover-error. */
export async function serviceReplicationBecomes(url: string, host: string, replicationStatus: string, timeoutMs = 60_000): Promise<void> {
  await eventually(async (note) => {
    const services = (await getJson(url, 'admin:admin', `/os-services?binary=cinder-volume&host=${encodeURIComponent(host)}`))?.services as { host: string; replication_status: string }[] | undefined;
    const seen = note(services?.find((s) => s.host === host)?.replication_status);
    if (seen === 'failover-error' && replicationStatus !== 'failover-error') throw new Error(`${host} went to failover-error`);
    return seen === replicationStatus || undefined;
  }, `${host} to reach replication status ${replicationStatus}`, { timeoutMs, intervalMs: 100 });
}

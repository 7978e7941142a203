/**
 * The replicated backend's service as the failover crash scenarios (volumes.ts on the local driver,
 * volumes-ebs.ts on aws-ebs) see and drive it through the Cinder API: its os-services row, a
 * failover_host request, and the fail back that puts each point's backend home first.
 */
import { eventually } from '../../support/poll.js';

type CinderCall = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;

export function replicatedService(cinder: CinderCall, host: string) {
  const service = async () => (await cinder('GET', `/os-services?host=${encodeURIComponent(host)}&binary=cinder-volume`)).body.services[0] as Record<string, any>;
  const failoverTo = (backendId: string) => cinder('PUT', '/os-services/failover_host', { host, backend_id: backendId });
  const serviceIs = (status: string, what: string) => eventually(async (note) => (note((await service()).replication_status) === status ? true : undefined), `${host} ${what}`, 180_000);
  /** Each point starts from the primary: the one before may have left the backend failed over. */
  const homeFirst = async () => {
    if (!(await service()).active_backend_id) return;
    const back = await failoverTo('default');
    if (back.status !== 202) throw new Error(`failback: ${back.status} ${JSON.stringify(back.body)}`);
    await serviceIs('enabled', 'back home');
  };
  return { service, failoverTo, homeFirst };
}

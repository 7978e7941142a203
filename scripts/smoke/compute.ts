/**
 * The smoke test's server checks through the nova CLI: a server booted through the API (not `nova
 * boot`, whose image lookup goes to Glance through the service catalog, which the doc's token and
 * endpoint aliases have none of) from the first image the compute driver can boot (images.ts),
 * live-migrated, cold-migrated and confirmed, then deleted.
 */
import { randomUUID } from 'node:crypto';
import { cli, parseListTable, parsePropertyTable, waitFor, type Target } from './cli.js';
import { chooseBootableImage, glanceImages, imageHead } from './images.js';
import { Skip, type Check } from './storage.js';

async function request(t: Target, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${t.api}compute/v2.1${path}`, {
    method,
    headers: { 'X-Auth-Token': t.token, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.status === 204 ? undefined : res.json();
}

const server = async (t: Target, id: string) => parsePropertyTable(await cli(t, `nova show ${id}`));
const hostOf = (s: Record<string, string>) => s['OS-EXT-SRV-ATTR:host'];

export const serverCheck: Check = {
  name: 'server moves',
  async run(t) {
    const hypervisors = parseListTable(await cli(t, 'nova hypervisor-list')).filter((h) => h.State === 'up');
    if (hypervisors.length < 2) throw new Skip(`${hypervisors.length} compute host(s) up: moves need two`);
    const flavor = parseListTable(await cli(t, 'nova flavor-list'))[0];
    if (!flavor) throw new Skip('no flavor to boot with');
    const images = await glanceImages(t);
    const choice = await chooseBootableImage(images, Number(flavor.Disk), (imageId) => imageHead(t, imageId));
    if (!choice) throw new Skip(`no image the compute driver can boot: ${images.length ? `passed over ${images.map((i) => i.name ?? i.id).join(', ')}` : 'none listed'}`);
    const image = `${choice.image.name ?? choice.image.id} (${choice.image.id}, ${choice.image.disk_format ?? 'raw'})${choice.passedOver.length ? `, passed over ${choice.passedOver.join(', ')}` : ''}`;
    const name = `smoke-${randomUUID().slice(0, 8)}`;
    const id = (await request(t, 'POST', '/servers', { server: { name, flavorRef: flavor.ID, imageRef: choice.image.id, networks: 'auto' } })).server.id as string;
    const settled = (s: Record<string, string>) => ['ACTIVE', 'ERROR', 'VERIFY_RESIZE'].includes(s.status ?? '') && (s['OS-EXT-STS:task_state'] ?? '-') === '-';
    const booted = await waitFor(`${name} ACTIVE`, () => server(t, id), settled);
    if (booted.status !== 'ACTIVE') throw new Error(`${name} booted from ${image} into ${booted.status}`);
    await cli(t, `nova live-migration ${id}`);
    const live = await waitFor(`${name} live-migrated`, () => server(t, id), settled);
    if (live.status !== 'ACTIVE' || hostOf(live) === hostOf(booted)) throw new Error(`after live migration ${name} is ${live.status} on ${hostOf(live)} (was ${hostOf(booted)})`);
    await cli(t, `nova migrate ${id}`);
    const resized = await waitFor(`${name} VERIFY_RESIZE`, () => server(t, id), settled);
    if (resized.status !== 'VERIFY_RESIZE') throw new Error(`after migrate ${name} is ${resized.status}`);
    await cli(t, `nova resize-confirm ${id}`);
    const confirmed = await waitFor(`${name} confirmed`, () => server(t, id), (s) => s.status === 'ACTIVE' && settled(s));
    await cli(t, `nova delete ${id}`);
    await waitFor(`${name} deleted`, async () => {
      try {
        await server(t, id);
        return false;
      } catch (e) {
        return /not be found|No server with a name or ID/i.test((e as Error).message);
      }
    }, (g) => g);
    return `boot of image ${image} on ${hostOf(booted)}, live migration to ${hostOf(live)}, cold migration to ${hostOf(confirmed)} and confirm, delete`;
  },
};

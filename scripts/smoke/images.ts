/**
 * The image the smoke's server check boots: the first, in name order (as Nova's image list), that
 * the create API takes and the compute driver can boot, rather than simply the first listed (a
 * stack may hold images no server boots from: one still queued, a kernel, a qcow2 whose data is
 * not qcow2). What boots is what the driver reads as a root disk (functions/drivers/compute/
 * driver.ts ImageSource, local/lifecycle.ts writeImage): a qcow2 image is converted by qemu-img,
 * which refuses data without the qcow2 header; a raw one (or one without disk_format) is the
 * disk's bytes as they are, at most the flavor's root disk.
 */
import type { Target } from './cli.js';

/** The fields of a Glance v2 image this choice reads. */
export interface GlanceImage {
  id: string;
  name: string | null;
  status: string;
  disk_format: string | null;
  size: number | null;
  min_disk: number;
}

export interface ImageChoice {
  image: GlanceImage;
  /** Each image listed before it, with why it was passed over. */
  passedOver: string[];
}

/** The first bytes of a qcow2 file ("QFI\xfb", qemu's QCOW_MAGIC). */
const QCOW2_MAGIC = Buffer.from([0x51, 0x46, 0x49, 0xfb]);
const GIB = 1024 ** 3;

/** Why the image cannot boot on a flavor with `rootGb` (0: the image's size), judged by its record; undefined when it may. */
export function notBootableByRecord(image: GlanceImage, rootGb: number): string | undefined {
  if (image.status !== 'active') return `status ${image.status}: the server create takes active images only`;
  if (!image.size) return 'no data';
  const format = image.disk_format ?? 'raw';
  if (format !== 'raw' && format !== 'qcow2') return `disk_format ${format}: the compute driver boots qcow2 and raw disks`;
  if (rootGb > 0 && image.min_disk > rootGb) return `min_disk ${image.min_disk} GB over the flavor's ${rootGb} GB`;
  if (rootGb > 0 && format === 'raw' && image.size > rootGb * GIB) return `${image.size} bytes, over the flavor's ${rootGb} GB root disk`;
  return undefined;
}

/**
 * The first image that boots; `head(id)` reads the first bytes of an image's data (only asked of
 * qcow2 candidates). Undefined when none does.
 */
export async function chooseBootableImage(images: GlanceImage[], rootGb: number, head: (id: string) => Promise<Uint8Array>): Promise<ImageChoice | undefined> {
  const passedOver: string[] = [];
  for (const image of images) {
    let why = notBootableByRecord(image, rootGb);
    if (!why && (image.disk_format ?? 'raw') === 'qcow2' && !Buffer.from(await head(image.id)).subarray(0, 4).equals(QCOW2_MAGIC)) why = 'disk_format qcow2, but its data is not qcow2';
    if (!why) return { image, passedOver };
    passedOver.push(`${image.name ?? image.id} (${why})`);
  }
  return undefined;
}

async function glance(t: Target, path: string, init: RequestInit = {}): Promise<Response> {
  const res = await fetch(`${t.api}image${path}`, { ...init, headers: { 'X-Auth-Token': t.token, ...init.headers } });
  if (!res.ok) throw new Error(`GET /image${path}: ${res.status} ${await res.text()}`);
  return res;
}

/** Every image the token sees, by name (Glance's next links followed). */
export async function glanceImages(t: Target): Promise<GlanceImage[]> {
  const images: GlanceImage[] = [];
  for (let path: string | undefined = '/v2/images?sort_key=name&sort_dir=asc&limit=100'; path; ) {
    const page = (await (await glance(t, path)).json()) as { images: GlanceImage[]; next?: string };
    images.push(...page.images);
    path = page.next;
  }
  return images;
}

/** The first bytes of an image's data (on AWS the download is a redirect to S3, which fetch follows); the rest is not read. */
export async function imageHead(t: Target, id: string): Promise<Uint8Array> {
  const res = await glance(t, `/v2/images/${id}/file`);
  if (!res.body) return new Uint8Array();
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  while (length < QCOW2_MAGIC.length) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    length += value.length;
  }
  await reader.cancel();
  return Buffer.concat(chunks);
}

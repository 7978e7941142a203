/**
 * The smoke's server check boots an image the compute driver can boot (scripts/smoke/images.ts),
 * not simply the first listed: each kind of image no server boots from, listed first, is passed
 * over with its reason.
 */
import { describe, expect, test } from 'vitest';
import { chooseBootableImage, type GlanceImage } from '../../scripts/smoke/images.js';

const QCOW2_HEADER = Uint8Array.from([0x51, 0x46, 0x49, 0xfb, 0, 0, 0, 3]);
const FILLER = new Uint8Array(64).fill(7);

const image = (name: string, extra: Partial<GlanceImage> = {}): GlanceImage => ({ id: `id-${name}`, name, status: 'active', disk_format: 'raw', size: 262_144, min_disk: 0, ...extra });

/** Data heads by image id; records which were read. */
function heads(byId: Record<string, Uint8Array>) {
  const read: string[] = [];
  return { read, head: async (id: string) => (read.push(id), byId[id] ?? new Uint8Array()) };
}

describe('chooseBootableImage', () => {
  test('a qcow2 image whose data is not qcow2, listed first, is passed over for the raw image after it', async () => {
    // Prepare: as the aws-docs run leaves the stack: the doc's imported `big` sorts before the sandbox's cirros-tiny.
    const { read, head } = heads({ 'id-big': FILLER });

    // Act
    const choice = await chooseBootableImage([image('big', { disk_format: 'qcow2', size: 65_536 }), image('cirros-tiny')], 1, head);

    // Assess
    expect(choice?.image.name).toBe('cirros-tiny');
    expect(choice?.passedOver).toEqual(['big (disk_format qcow2, but its data is not qcow2)']);
    expect(read).toEqual(['id-big']);
  });

  test('a real qcow2 image is chosen; raw images are never read', async () => {
    const { read, head } = heads({ 'id-a-qcow2': QCOW2_HEADER });
    const choice = await chooseBootableImage([image('a-qcow2', { disk_format: 'qcow2' }), image('cirros-tiny')], 1, head);
    expect(choice?.image.name).toBe('a-qcow2');
    expect(choice?.passedOver).toEqual([]);

    const raw = await chooseBootableImage([image('cirros-tiny', { disk_format: null })], 1, head);
    expect(raw?.image.name).toBe('cirros-tiny');
    expect(read).toEqual(['id-a-qcow2']);
  });

  test('queued, empty, kernel, too large for the flavor: each passed over with its reason', async () => {
    const { head } = heads({});
    const listed = [
      image('a-queued', { status: 'queued', size: null }),
      image('b-empty', { size: 0 }),
      image('c-kernel', { disk_format: 'aki' }),
      image('d-min-disk', { min_disk: 20 }),
      image('e-large', { size: 2 * 1024 ** 3 }),
      image('f-good'),
    ];

    const choice = await chooseBootableImage(listed, 1, head);

    expect(choice?.image.name).toBe('f-good');
    expect(choice?.passedOver).toEqual([
      'a-queued (status queued: the server create takes active images only)',
      'b-empty (no data)',
      'c-kernel (disk_format aki: the compute driver boots qcow2 and raw disks)',
      "d-min-disk (min_disk 20 GB over the flavor's 1 GB)",
      "e-large (2147483648 bytes, over the flavor's 1 GB root disk)",
    ]);
    // A flavor with root_gb 0 takes the image's size: the large image boots there.
    expect((await chooseBootableImage(listed.slice(3), 0, head))?.image.name).toBe('d-min-disk');
  });

  test('none bootable: undefined', async () => {
    expect(await chooseBootableImage([image('a-queued', { status: 'queued' })], 1, heads({}).head)).toBeUndefined();
  });
});

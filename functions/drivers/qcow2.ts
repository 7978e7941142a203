/**
 * qcow2 disk images read through `qemu-img` (Debian's qemu-utils, which scripts/ensure-system.sh
 * installs): a qcow2 image read back into a raw file leaves every unallocated or all-zero cluster a
 * hole, so a spawn from a ~10 MiB image of a 1 GiB disk writes ~10 MiB. The local compute driver's
 * snapshots are written as qcow2 by Ferry itself (qcow2-writer.ts: one layout, streamed, no process).
 *
 * Why qemu-img for reading rather than a reader of Ferry's own: it is the format's reference
 * implementation (the same tool Nova and Cinder run), and it reads any qcow2 a user uploads, not
 * only Ferry's layout. Its cost: a 1.3 MB package, two short processes per spawn from a qcow2
 * image, and the image passing through a file (qemu-img reads it with seeks, not from a pipe).
 *
 * An image from outside is checked before it is read (as Nova's qemu_img_info check does): a
 * backing file or an external data file would make qemu-img open another file of the host, and
 * an encrypted image cannot be read without its key; all three are refused, and so is a virtual
 * size larger than the disk it is to become.
 */
import { execFile } from 'node:child_process';
import { DriverError } from '../core/errors.js';

/** Output kept from one qemu-img run (its JSON info is small; convert prints nothing). */
const MAX_OUTPUT_BYTES = 1024 * 1024;

/** Runs qemu-img; a missing binary is said plainly, with the package that brings it. */
function qemuImg(args: string[], context: Record<string, unknown>): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('qemu-img', args, { maxBuffer: MAX_OUTPUT_BYTES }, (error, stdout, stderr) => {
      if (!error) return resolve(stdout);
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        return reject(new DriverError('qemu-img is not installed: qcow2 images need it (Debian: apt-get install qemu-utils; scripts/ensure-system.sh installs it)', { context, cause: error }));
      }
      reject(new DriverError(`qemu-img ${args[0]} failed: ${String(stderr).trim() || error.message}`, { context, cause: error }));
    });
  });
}

export interface Qcow2Info {
  virtualSizeBytes: number;
}

/**
 * What the image at `path` is, checked as a qcow2 image safe to read on its own.
 * @throws DriverError when it is not qcow2, has a backing file or an external data file, is encrypted,
 * or is larger than `maxVirtualBytes`.
 */
export async function checkQcow2(path: string, maxVirtualBytes?: number): Promise<Qcow2Info> {
  const context = { path };
  const out = await qemuImg(['info', '-f', 'qcow2', '--output=json', path], context);
  let info: Record<string, unknown>;
  try {
    info = JSON.parse(out) as Record<string, unknown>;
  } catch (e) {
    throw new DriverError(`qemu-img info of ${path} printed no JSON`, { context, cause: e });
  }
  const refuse = (why: string) => new DriverError(`image ${path} is refused: ${why}`, { context });
  if (info.format !== 'qcow2') throw refuse(`it is ${String(info.format)}, not qcow2`);
  if (info['backing-filename'] !== undefined || info['full-backing-filename'] !== undefined) throw refuse('it has a backing file');
  const specific = (info['format-specific'] as { data?: Record<string, unknown> } | undefined)?.data ?? {};
  if (specific['data-file'] !== undefined) throw refuse('it has an external data file');
  if (info.encrypted === true || specific.encrypt !== undefined) throw refuse('it is encrypted');
  const virtualSizeBytes = Number(info['virtual-size']);
  if (!Number.isSafeInteger(virtualSizeBytes) || virtualSizeBytes < 0) throw refuse(`its virtual size ${String(info['virtual-size'])} is not a size`);
  if (maxVirtualBytes !== undefined && virtualSizeBytes > maxVirtualBytes) throw refuse(`its virtual size ${virtualSizeBytes} bytes is larger than the ${maxVirtualBytes} bytes allowed`);
  return { virtualSizeBytes };
}

/**
 * Writes the qcow2 image `qcow2` (checked by checkQcow2 first) as a new sparse raw file `raw` of
 * its virtual size: clusters that are unallocated or all zeros stay holes.
 */
export async function qcow2ToRaw(qcow2: string, raw: string, maxVirtualBytes?: number): Promise<Qcow2Info> {
  const info = await checkQcow2(qcow2, maxVirtualBytes);
  await qemuImg(['convert', '-f', 'qcow2', '-O', 'raw', qcow2, raw], { qcow2, raw });
  return info;
}

/** Whether the bucket holds an image's bytes (`images/<id>`): the import tests' "nothing left behind". */
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { bucket, s3 } from '../../functions/core/s3.js';
import { imageObjectKey } from '../../functions/servers/images.js';

export async function imageObjectExists(id: string): Promise<boolean> {
  try {
    await (await s3()).send(new HeadObjectCommand({ Bucket: bucket(), Key: imageObjectKey(id) }));
    return true;
  } catch (e) {
    if ((e as { name?: string }).name === 'NotFound') return false;
    throw e;
  }
}

/** Reading an attachment's attach wait (functions/attachments/attach-wait.ts) where it is kept: its volume's `attachWaits`. */
import { getAttachmentRecord, getVolumeRecord } from '../../functions/attachments/repo.js';
import type { AttachWait } from '../../functions/volumes/model.js';

/** The attachment's wait as its volume records it; undefined when the attachment, its volume or the wait is gone. */
export async function attachWaitOf(attachmentId: string): Promise<AttachWait | undefined> {
  const attachment = await getAttachmentRecord(attachmentId);
  if (!attachment) return undefined;
  return (await getVolumeRecord(attachment.volumeId))?.volume.attachWaits?.[attachmentId];
}

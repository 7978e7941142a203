/**
 * The attachments API's response bodies, as C/api/v3/views/attachments.py builds them.
 */
import type { AttachmentSummary } from '../volumes/model.js';
import { upstreamTime } from '../volumes/model.js';
import type { Attachment } from './model.js';

export interface SummaryView {
  id: string;
  status: string;
  instance: string | null;
  volume_id: string;
}

export interface DetailView extends SummaryView {
  attached_at: string;
  detached_at: string;
  attach_mode: string;
  connection_info: Record<string, unknown> | null;
}

export function summaryView(a: Pick<Attachment, 'id' | 'attachStatus' | 'instanceUuid' | 'volumeId'>): SummaryView {
  return { id: a.id, status: a.attachStatus, instance: a.instanceUuid, volume_id: a.volumeId };
}

/** SUMMARY from the volume item's copy of an attachment (the DELETE response needs no attachment reads). */
export function summaryViewFromVolume(volumeId: string, id: string, s: AttachmentSummary): SummaryView {
  return { id, status: s.status, instance: s.instanceUuid, volume_id: volumeId };
}

export function detailView(a: Attachment): DetailView {
  return {
    ...summaryView(a),
    attached_at: upstreamTime(a.attachTime) ?? '',
    detached_at: upstreamTime(a.detachTime) ?? '',
    attach_mode: a.attachMode,
    connection_info: a.connectionInfo,
  };
}

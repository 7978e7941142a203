/**
 * Ports of the attachments capability: questions Cinder asks a layer above it (Nova), answered by
 * whatever the entry point registers. The attachments code never imports the servers code; the
 * Cinder API handler (api/volume.ts) and the Nova entry points (api/compute.ts, servers/steps.ts)
 * register the implementation when they load.
 */
import { ConfigurationError } from '../core/errors.js';

/** Whether a server still uses an attachment (Cinder's `attachment_deletion_allowed` check). */
export interface AttachmentUsers {
  /** True when server `instanceUuid` has a block device mapping of `volumeId` that uses `attachmentId`. */
  attachmentInUseByServer(instanceUuid: string, volumeId: string, attachmentId: string): Promise<boolean>;
}

let registered: AttachmentUsers | undefined;

/** Called by an entry point when it loads; a later registration replaces an earlier one (all register the same one). */
export function registerAttachmentUsers(impl: AttachmentUsers): void {
  registered = impl;
}

/** The registered AttachmentUsers; a ConfigurationError when no entry point registered one. */
export function getAttachmentUsers(): AttachmentUsers {
  if (!registered) {
    throw new ConfigurationError('No AttachmentUsers port is registered: the entry point must call registerAttachmentUsers (functions/attachments/ports.ts) before deleting attachments.');
  }
  return registered;
}

/**
 * PUT /attachments/{id} from the volume's record, when this process knows the attachment's volume
 * and project (volume-records.ts knownAttachment) and remembers the volume (knownVolume), or the
 * caller read the volume (os-initialize_connection's route): TWO requests in the API's cycle (was
 * 3: the attachment read, the connect intent returning the volume, the transaction).
 *
 * The connect decides on the remembered volume and on its summary of the attachment (what
 * `connect` reads of the attachment: its mode, host and connector are in the summary), and the
 * decision comes before an effect outside DynamoDB (initializeConnection). So the intent is
 * recorded on the volume in ONE UpdateItem conditioned on the volume still being at the remembered
 * version (repo-intents.ts writeConnectIntentAtVersion): the record the decision used is proven
 * current at that moment, as a read would prove it. A volume moved since: the check's refusal returns the
 * current record, and the decision is taken again on it (no read). The connect's transaction then
 * writes the attachment's connect fields under the volume's version (repo-from-volume.ts
 * writeConnectFromVolume), as os-complete and the delete do from the record.
 *
 * Anything the record cannot decide goes by id (service.ts startConnect), which answers as
 * upstream: no summary, a summary from before volumes kept the connector, a refusal (policy, the
 * connect's rules: answered from a read), or an item that is not what the process remembers.
 */
import type { AuthContext } from '../core/auth.js';
import { FerryError } from '../core/errors.js';
import { authorize } from '../core/policy.js';
import type { Connector } from '../drivers/volume/driver.js';
import type { ConnectStart } from './connections.js';
import { now } from './connections.js';
import { attachmentOfSummary } from './listed-removal.js';
import { newConnectIntent } from './model.js';
import { ATTACHMENT_POLICIES } from './removal.js';
import { writeConnectIntentAtVersion } from './repo-intents.js';
import { checkConnect } from './transitions.js';
import { knownVolume, type LoadedVolume } from './volume-records.js';

export interface ListedConnectInput {
  auth: AuthContext;
  attachmentId: string;
  connector: Connector;
  callId?: string;
  volumeId: string;
  /** The attachment's project as this process knows it: the policy is checked against it and the intent's write conditioned on it. */
  projectId: string;
  /** The volume as the caller read it in this request (a pre-3.27 action's route), else the one this process remembers. */
  record?: LoadedVolume;
}

/** Volume records moved under the check before the connect goes by id (each costs the one intent write). */
const ATTEMPTS = 3;

/** The connect's start with its intent recorded, or undefined: the caller connects by id. */
export async function startConnectListed(input: ListedConnectInput): Promise<ConnectStart | undefined> {
  const { auth, attachmentId, connector, projectId } = input;
  const intent = newConnectIntent(attachmentId, connector, now(), input.callId);
  let loaded = input.record ?? knownVolume(input.volumeId);
  for (let attempt = 0; loaded && attempt < ATTEMPTS; attempt++) {
    const volume = loaded.volume;
    const summary = volume.attachments[attachmentId];
    if (!summary || (summary.connected && !summary.connector)) return undefined;
    const attachment = attachmentOfSummary(volume, attachmentId, summary, projectId);
    try {
      authorize(auth, ATTACHMENT_POLICIES.update, { projectId });
      checkConnect(volume, attachment, { checkDuplicates: true });
    } catch (e) {
      // A refusal is answered by id, from a read, as it always was: the remembered record may be behind.
      if (e instanceof FerryError) return undefined;
      throw e;
    }
    const write = await writeConnectIntentAtVersion(attachmentId, intent, volume, projectId);
    if (write === 'written') return { attachment, intent, volume: loaded, listedProjectId: projectId };
    if (write === 'refused') return undefined;
    loaded = write.moved;
  }
  return undefined;
}

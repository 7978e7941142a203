/**
 * What an aws-ebs backend's replication made in the regions it does not run on, for the audit of
 * unowned replicas (audit/replica-unowned.ts): every volume tagged `ferry:backend` = the backend in
 * each target region (failover volumes, drill copies) and, while failed over, in the primary region
 * (the volumes left there, failback volumes); in the region it runs on only the drill copies, which
 * its own listing (listVolumes) leaves out. Found by the backend tag, page after page, never by a
 * remembered id; a region that does not answer is said so, never listed as empty.
 */
import type { Volume } from '@aws-sdk/client-ec2';
import type { SiteListing, SiteVolume } from './driver.js';
import { CONNECTED_STATES, NOT_FOUND_CODES, TAG_BACKEND, TAG_BACKEND_NAME, TAG_DRILL, ec2Sdk, errorCode, tagOf } from './aws-ebs-ec2.js';
import { deleteVolumeIn, type EbsReplication, type EbsReplicationContext, type EbsSite } from './aws-ebs-replication.js';

/** Per site (`active`: the target the backend runs on, undefined on the primary), its volumes or why it could not be read. */
export async function listSiteVolumes(c: EbsReplicationContext, active: EbsSite | undefined): Promise<SiteListing[]> {
  const sites = [...(active ? [c.primary] : []), ...c.targets];
  return Promise.all(
    sites.map(async (site): Promise<SiteListing> => {
      try {
        const onActive = site.backendId === active?.backendId;
        const volumes = (await c.volumes(site.region, [])).map((v) => siteVolumeOf(c, site, v)).filter((v) => !onActive || v.kind === 'drill');
        return { site: site.backendId, volumes };
      } catch (e) {
        // Not swallowed: the audit reports the site unreadable (replica-site-unreadable).
        return { site: site.backendId, error: (e as Error).message };
      }
    }),
  );
}

/** One volume of the backend in a site, as EC2 has it now (DescribeVolumes by id); undefined when gone or not the backend's. */
export async function getSiteVolume(r: EbsReplication, c: EbsReplicationContext, site: string, volumeId: string): Promise<SiteVolume | undefined> {
  const where = siteOf(r, c, site);
  let found: Volume | undefined;
  try {
    found = (await (await c.client(where.region)).send(new (await ec2Sdk()).DescribeVolumesCommand({ VolumeIds: [volumeId] }))).Volumes?.[0];
  } catch (e) {
    if (NOT_FOUND_CODES.has(errorCode(e))) return undefined;
    throw c.fail(`EBS DescribeVolumes of ${volumeId} in ${where.region} failed: ${errorCode(e)}: ${(e as Error).message}`, { site, volumeId, code: errorCode(e) });
  }
  if (!found || tagOf(found, TAG_BACKEND) !== c.host || found.State === 'deleted') return undefined;
  return siteVolumeOf(c, where, found);
}

/** DeleteVolume in the site's region; InvalidVolume.NotFound is done. EC2 refuses one attached (VolumeInUse): that failure is the caller's to report. */
export async function deleteSiteVolume(r: EbsReplication, c: EbsReplicationContext, site: string, volumeId: string): Promise<void> {
  await deleteVolumeIn(c, siteOf(r, c, site).region, volumeId);
}

const siteOf = (r: EbsReplication, c: EbsReplicationContext, site: string): EbsSite => (site === '' ? c.primary : r.target(site));

function siteVolumeOf(c: EbsReplicationContext, site: EbsSite, v: Volume): SiteVolume {
  const drill = tagOf(v, TAG_DRILL);
  return {
    site: site.backendId,
    location: v.VolumeId!,
    backendName: drill ?? tagOf(v, TAG_BACKEND_NAME) ?? v.VolumeId!,
    kind: drill ? 'drill' : 'volume',
    state: v.State ?? 'unknown',
    // EC2 always answers CreateTime; without it the age is unknown, so the volume counts as new.
    createdAt: v.CreateTime ? new Date(v.CreateTime).getTime() : c.now(),
    inUse: v.State === 'in-use' || (v.Attachments ?? []).some((a) => CONNECTED_STATES.has(a.State ?? '')),
  };
}

/**
 * The aws-ebs driver's listing of what its replication made in the regions it does not run on
 * (aws-ebs-sites.ts, SiteVolumeDriver), which the audit of unowned replicas reads
 * (audit/replica-unowned.ts), against mocked regions: DescribeVolumes by the backend's tag page
 * after page (NextToken), a volume creating, in use or deleting, a throttled region
 * (RequestLimitExceeded) said unreadable rather than empty; and the repair's look and delete by id.
 * Replies as the EC2 API reference gives them (Volumes[].State, CreateTime, Attachments, Tags; NextToken).
 */
import { DescribeVolumesCommand, type Volume } from '@aws-sdk/client-ec2';
import { describe, expect, it } from 'vitest';
import { DriverError } from '../../functions/core/errors.js';
import type { SiteListing } from '../../functions/drivers/volume/driver.js';
import { awsError } from '../support/fake-ec2.js';
import { EBS_REPLICATION_START, useEbsReplication } from '../support/ebs-regions.js';

const HOST = 'ferry@ebs-r';
const CLOCK = EBS_REPLICATION_START;
const { mocks, driverOn, fake } = useEbsReplication(HOST);

const drillTags = (name: string) => ({ Tags: [{ Key: 'Name', Value: `drill-${name}` }, { Key: 'ferry:drill', Value: name }, { Key: 'ferry:replication', Value: 'drill' }, { Key: 'ferry:backend', Value: HOST }] });
/** Each site's listing as `site: [kind backendName state]`, or its error. */
const summary = (listings: SiteListing[]) =>
  Object.fromEntries(listings.map((l) => [l.site || 'primary', 'error' in l ? `error: ${l.error}` : l.volumes.map((v) => `${v.kind} ${v.backendName} ${v.state}${v.inUse ? ' in-use' : ''}`).sort()]));


describe('listSiteVolumes', () => {
  it('lists every volume tagged as the backend\'s in each target region, across pages, and nothing of another backend; the primary not while it runs there', async () => {
    // Prepare: five volumes in Frankfurt (the fake pages two at a time: three pages), one drill copy in Virginia, one of another backend.
    for (let i = 1; i <= 4; i++) fake('eu-central-1').add(`volume-f${i}`, 1);
    fake('eu-central-1').add('volume-d1', 1, 'gp', drillTags('volume-d1'));
    fake('us-east-1').add('volume-d2', 1, 'gp', drillTags('volume-d2'));
    fake('us-east-1').add('volume-other', 1, 'gp', { Tags: [{ Key: 'ferry:backend', Value: 'ferry@other' }, { Key: 'ferry:backend-name', Value: 'volume-other' }] });
    fake('eu-west-1').add('volume-home', 1);

    // Act
    const listings = await driverOn().listSiteVolumes();

    // Assess
    expect(summary(listings)).toEqual({
      frankfurt: ['drill volume-d1 available', 'volume volume-f1 available', 'volume volume-f2 available', 'volume volume-f3 available', 'volume volume-f4 available'],
      virginia: ['drill volume-d2 available'],
    });
    const tokens = mocks.get('eu-central-1')!.commandCalls(DescribeVolumesCommand).map((c) => c.args[0].input.NextToken);
    expect(tokens).toEqual([undefined, '2', '4']);
    expect(mocks.get('eu-west-1')!.commandCalls(DescribeVolumesCommand)).toEqual([]);
  });

  it('failed over: the primary region in full (what was left there), the active target\'s drill copies only', async () => {
    // Prepare
    fake('eu-west-1').add('volume-home', 1);
    fake('eu-central-1').add('volume-a', 1);
    fake('eu-central-1').add('volume-d', 1, 'gp', drillTags('volume-d'));

    // Act
    const listings = await driverOn('frankfurt').listSiteVolumes();

    // Assess
    expect(summary(listings)).toEqual({ primary: ['volume volume-home available'], frankfurt: ['drill volume-d available'], virginia: [] });
  });

  it('reports a volume creating or in use as it is, leaves out one deleting, and says when it was made', async () => {
    // Prepare: Frankfurt answers as EC2 does, one page of three volumes.
    const tags = (name: string) => [{ Key: 'ferry:backend', Value: HOST }, { Key: 'ferry:backend-name', Value: name }];
    const made = new Date(CLOCK - 3_600_000);
    const volumes: Volume[] = [
      { VolumeId: 'vol-c', State: 'creating', CreateTime: made, Tags: tags('volume-c'), Attachments: [] },
      { VolumeId: 'vol-u', State: 'in-use', CreateTime: made, Tags: tags('volume-u'), Attachments: [{ VolumeId: 'vol-u', InstanceId: 'i-1', State: 'attached' }] },
      { VolumeId: 'vol-x', State: 'deleting', CreateTime: made, Tags: tags('volume-x'), Attachments: [] },
    ];
    mocks.get('eu-central-1')!.on(DescribeVolumesCommand).resolves({ Volumes: volumes });

    // Act
    const listings = await driverOn().listSiteVolumes();

    // Assess
    expect(summary(listings).frankfurt).toEqual(['volume volume-c creating', 'volume volume-u in-use in-use']);
    const frankfurt = listings.find((l) => l.site === 'frankfurt');
    expect(frankfurt && 'volumes' in frankfurt ? frankfurt.volumes.map((v) => v.createdAt) : []).toEqual([made.getTime(), made.getTime()]);
  });

  it('a region that does not answer (throttled, or down) is listed as unreadable, never as empty; the others are listed', async () => {
    // Prepare: Frankfurt's first page answers, its second is throttled; Virginia is not reachable.
    for (let i = 1; i <= 3; i++) fake('eu-central-1').add(`volume-f${i}`, 1);
    mocks.get('eu-central-1')!.on(DescribeVolumesCommand).callsFakeOnce((input) => fake('eu-central-1').describeVolumes(input)).rejectsOnce(awsError('RequestLimitExceeded', 'Request limit exceeded.'));
    mocks.get('us-east-1')!.on(DescribeVolumesCommand).rejects(Object.assign(new Error('connect ETIMEDOUT'), { name: 'TimeoutError' }));

    // Act
    const listings = await driverOn().listSiteVolumes();

    // Assess
    const s = summary(listings);
    expect(s.frankfurt).toMatch(/^error: .*RequestLimitExceeded/);
    expect(s.virginia).toMatch(/^error: .*TimeoutError/);
  });
});

describe('getSiteVolume and deleteSiteVolume (the repair)', () => {
  it('looks at one volume by id: gone or another backend\'s is undefined; deletes it once, a second delete is done; EC2 refusing an attached one is an error', async () => {
    // Prepare
    const mine = fake('eu-central-1').add('volume-m', 1).VolumeId!;
    const other = fake('eu-central-1').add('volume-o', 1, 'gp', { Tags: [{ Key: 'ferry:backend', Value: 'ferry@other' }] }).VolumeId!;
    const attached = fake('eu-central-1').add('volume-a', 1, 'gp', { State: 'in-use', Attachments: [{ InstanceId: 'i-1', State: 'attached' }] }).VolumeId!;
    const driver = driverOn();

    // Act + Assess
    expect(await driver.getSiteVolume('frankfurt', mine)).toMatchObject({ site: 'frankfurt', location: mine, backendName: 'volume-m', kind: 'volume', state: 'available', inUse: false, createdAt: CLOCK });
    expect(await driver.getSiteVolume('frankfurt', other)).toBeUndefined();
    expect(await driver.getSiteVolume('frankfurt', 'vol-none')).toBeUndefined();
    await driver.deleteSiteVolume('frankfurt', mine);
    expect(fake('eu-central-1').volumes.has(mine)).toBe(false);
    await driver.deleteSiteVolume('frankfurt', mine);
    const refused = await driver.deleteSiteVolume('frankfurt', attached).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DriverError);
    expect((refused as DriverError).message).toContain('VolumeInUse');
    expect(fake('eu-central-1').volumes.has(attached)).toBe(true);
  });
});

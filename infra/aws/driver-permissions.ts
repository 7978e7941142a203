/**
 * What the AWS drivers may do, granted to the functions that run them (wiring `callsVolumeDrivers`,
 * `callsShareDrivers`; the share drivers' statements are share-driver-permissions.ts's).
 * Written from the EC2 service authorization reference, and proven by test/infra/permissions.test.ts:
 * it runs every path of the aws-ebs driver against a mocked EC2 client, turns each recorded call into
 * the IAM requests EC2 authorizes (every resource type the action requires, with its tags), and
 * simulates them against the synthesized role of every function whose bundle contains the driver.
 * A call the driver makes that a role here does not allow fails that test; so does a grant no call
 * needs.
 *
 * Scope: the account's EBS volumes and snapshots that carry `ferry:backend` (the driver tags all it
 * makes, and finds volumes only by that tag), in any region. Manage may adopt a volume that carries
 * no `ferry:backend` yet by adding Ferry's tags (never retagging one that has it: that would take
 * another backend's volume), and remove them again only from a volume it adopted (`ferry:adopted`) (a backend's region is its availability
 * zone's, which the inventory, not the stack, names). Instances are whatever an operator connects:
 * attach and detach may name any instance of the account, but only with a Ferry volume.
 */
import { Aws, Validations } from 'aws-cdk-lib';
import { PolicyStatement } from 'aws-cdk-lib/aws-iam';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import { TAG_ADOPTED, TAG_BACKEND } from '../../functions/drivers/volume/aws-ebs-ec2.js';
import { TAG_REPLICATED, TAG_REPLICATION, TAG_SOURCE_SNAPSHOT, TAG_SOURCE_TIME, TAG_TARGET } from '../../functions/drivers/volume/aws-ebs-replication.js';

/** `arn:<partition>:ec2:*:<account>:<type>/*`; an EBS snapshot's ARN has no account in it. */
export const ec2Arn = (type: string) => `arn:${Aws.PARTITION}:ec2:*:${type === 'snapshot' ? '' : Aws.ACCOUNT_ID}:${type}/*`;

const taggedResource = { StringLike: { [`aws:ResourceTag/${TAG_BACKEND}`]: '*' } };
const taggedRequest = { StringLike: { [`aws:RequestTag/${TAG_BACKEND}`]: '*' } };

/** The aws-ebs volume driver's statements (functions/drivers/volume/aws-ebs*.ts). */
export function ebsDriverStatements(): PolicyStatement[] {
  return [
    // Describe* have no resource-level permissions in EC2: `*` is the only resource they take.
    new PolicyStatement({ sid: 'EbsDescribe', actions: ['ec2:DescribeVolumes', 'ec2:DescribeSnapshots', 'ec2:DescribeInstances'], resources: ['*'] }),
    // A new volume or snapshot must carry the backend tag, so everything below can require it.
    new PolicyStatement({ sid: 'EbsCreateVolume', actions: ['ec2:CreateVolume'], resources: [ec2Arn('volume')], conditions: taggedRequest }),
    // CopySnapshot (replication to a target region, failback home) makes a snapshot like CreateSnapshot.
    new PolicyStatement({ sid: 'EbsCreateSnapshot', actions: ['ec2:CreateSnapshot', 'ec2:CopySnapshot'], resources: [ec2Arn('snapshot')], conditions: taggedRequest }),
    // Tagging on create (TagSpecifications) is authorized as ec2:CreateTags with ec2:CreateAction.
    new PolicyStatement({
      sid: 'EbsTagOnCreate',
      actions: ['ec2:CreateTags'],
      resources: [ec2Arn('volume'), ec2Arn('snapshot')],
      conditions: { StringEquals: { 'ec2:CreateAction': ['CreateVolume', 'CreateSnapshot', 'CopySnapshot'] } },
    }),
    new PolicyStatement({
      sid: 'EbsFerryVolumes',
      actions: ['ec2:AttachVolume', 'ec2:DetachVolume', 'ec2:DeleteVolume', 'ec2:ModifyVolume', 'ec2:CreateSnapshot'],
      resources: [ec2Arn('volume')],
      conditions: taggedResource,
    }),
    // Adoption (manage of a volume Ferry did not make): only ferry:* keys, only on a volume none of
    // whose ferry:backend is set, so two backends racing for one volume cannot both take it.
    new PolicyStatement({
      sid: 'EbsAdoptVolumes',
      actions: ['ec2:CreateTags'],
      resources: [ec2Arn('volume')],
      conditions: {
        Null: { [`aws:ResourceTag/${TAG_BACKEND}`]: 'true' },
        StringLike: { [`aws:RequestTag/${TAG_BACKEND}`]: '*' },
        'ForAllValues:StringLike': { 'aws:TagKeys': ['ferry:*'] },
      },
    }),
    new PolicyStatement({
      sid: 'EbsReleaseAdopted',
      actions: ['ec2:DeleteTags'],
      resources: [ec2Arn('volume')],
      conditions: { StringEquals: { [`aws:ResourceTag/${TAG_ADOPTED}`]: 'true' }, 'ForAllValues:StringLike': { 'aws:TagKeys': ['ferry:*'] } },
    }),
    // A Ferry snapshot may be deleted, copied to another region, or made a volume (failover, drill, failback).
    new PolicyStatement({ sid: 'EbsFerrySnapshots', actions: ['ec2:DeleteSnapshot', 'ec2:CopySnapshot', 'ec2:CreateVolume'], resources: [ec2Arn('snapshot')], conditions: taggedResource }),
    // Replication marks a Ferry volume for the passes by one tag, and only that tag.
    new PolicyStatement({
      sid: 'EbsMarkReplicated',
      actions: ['ec2:CreateTags', 'ec2:DeleteTags'],
      resources: [ec2Arn('volume')],
      conditions: { ...taggedResource, 'ForAllValues:StringEquals': { 'aws:TagKeys': [TAG_REPLICATED] } },
    }),
    // A failback keeps its snapshots as the replication's newest source and copy (aws-ebs-failback.ts): those keys only.
    new PolicyStatement({
      sid: 'EbsKeepFailbackPoint',
      actions: ['ec2:CreateTags'],
      resources: [ec2Arn('snapshot')],
      conditions: { ...taggedResource, 'ForAllValues:StringEquals': { 'aws:TagKeys': [TAG_REPLICATION, TAG_SOURCE_SNAPSHOT, TAG_SOURCE_TIME, TAG_TARGET] } },
    }),
    new PolicyStatement({ sid: 'EbsInstances', actions: ['ec2:AttachVolume', 'ec2:DetachVolume'], resources: [ec2Arn('instance')] }),
  ];
}

/** Grants the volume drivers' statements to a function that runs them, with cdk-nag's findings answered. */
export function grantVolumeDrivers(fn: IFunction): void {
  for (const s of ebsDriverStatements()) fn.addToRolePolicy(s);
  // `Resource::*` (the Describe* actions) is acknowledged for every function already, for X-Ray.
  for (const type of ['volume', 'snapshot', 'instance']) {
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:*:${type === 'snapshot' ? '' : '<AWS::AccountId>'}:${type}/*]`,
      reason: `EBS ${type}s are named at run time by the inventory's backends and the connectors; volumes and snapshots only with the ferry:backend tag (infra/aws/driver-permissions.ts, proven by test/infra/permissions.test.ts).`,
    });
  }
}

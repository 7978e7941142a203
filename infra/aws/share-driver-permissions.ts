/**
 * What the aws-efs share driver may do (functions/drivers/share/aws-efs*.ts), granted to the
 * functions whose bundle contains it (wiring `callsShareDrivers`). Written from the service
 * authorization references of EFS and EC2 and the EFS API reference (CreateMountTarget also needs
 * ec2:DescribeSubnets, ec2:DescribeNetworkInterfaces and ec2:CreateNetworkInterface of its caller,
 * DeleteMountTarget ec2:DeleteNetworkInterface; tagging on create is elasticfilesystem:TagResource
 * with elasticfilesystem:CreateAction), and proven by test/infra/permissions.test.ts, which runs
 * every path of the driver (create, access rules, extend, shrink and quota, delete, migration by
 * replication, the reconciler's look at replications and its deletion of a stray one) against mocked clients and simulates each call's IAM requests against the roles.
 *
 * Scope: file systems and security groups that carry `ferry:backend` (the driver tags all it makes
 * and finds them only by their tags and creation token), in any region (a backend's region is the
 * inventory's, not the stack's). A file system is created only encrypted and with that tag; tags
 * are changed afterwards only for the driver's own keys (the quota, a migration's marks). The
 * network interfaces of mount targets are EFS's, made in the inventory's subnets: account-wide,
 * as EFS names neither before it makes them.
 */
import { Aws, Validations } from 'aws-cdk-lib';
import { PolicyStatement } from 'aws-cdk-lib/aws-iam';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import { TAG_BACKEND, TAG_MIGRATION_CAST, TAG_MIGRATION_CUTOVER, TAG_QUOTA_GB } from '../../functions/drivers/share/aws-efs-sdk.js';
import type { FunctionWiring } from '../../functions/wiring.js';
import { ec2Arn, grantVolumeDrivers } from './driver-permissions.js';

const fileSystems = `arn:${Aws.PARTITION}:elasticfilesystem:*:${Aws.ACCOUNT_ID}:file-system/*`;
const taggedResource = { StringLike: { [`aws:ResourceTag/${TAG_BACKEND}`]: '*' } };
const taggedRequest = { StringLike: { [`aws:RequestTag/${TAG_BACKEND}`]: '*' } };

/** The tag keys the driver changes on a file system it made: the quota (extendShare), a migration's cast and cut-over marks. */
export const EFS_DRIVER_TAG_KEYS = [TAG_QUOTA_GB, TAG_MIGRATION_CAST, TAG_MIGRATION_CUTOVER];
/** The tag keys it removes: a cancelled migration's cast mark. */
export const EFS_DRIVER_UNTAG_KEYS = [TAG_MIGRATION_CAST];

export function efsDriverStatements(): PolicyStatement[] {
  return [
    // Listing (and finding by creation token) names no file system: `*` is its only resource.
    new PolicyStatement({ sid: 'EfsList', actions: ['elasticfilesystem:DescribeFileSystems'], resources: ['*'] }),
    new PolicyStatement({
      sid: 'EfsCreate',
      actions: ['elasticfilesystem:CreateFileSystem'],
      resources: ['*'],
      conditions: { ...taggedRequest, Bool: { 'elasticfilesystem:Encrypted': 'true' } },
    }),
    new PolicyStatement({
      sid: 'EfsTagOnCreate',
      actions: ['elasticfilesystem:TagResource'],
      resources: [fileSystems],
      conditions: { ...taggedRequest, StringEquals: { 'elasticfilesystem:CreateAction': 'CreateFileSystem' } },
    }),
    new PolicyStatement({
      sid: 'EfsFerryFileSystems',
      actions: [
        'elasticfilesystem:DescribeFileSystems',
        'elasticfilesystem:DeleteFileSystem',
        'elasticfilesystem:DescribeMountTargets',
        'elasticfilesystem:CreateMountTarget',
        'elasticfilesystem:DeleteMountTarget',
        'elasticfilesystem:DescribeFileSystemPolicy',
        'elasticfilesystem:PutFileSystemPolicy',
        // Driver-assisted migration: replication from a Ferry file system to another (its destination
        // made as a Ferry share first, its overwrite protection turned off), and its deletion.
        'elasticfilesystem:DescribeReplicationConfigurations',
        'elasticfilesystem:CreateReplicationConfiguration',
        'elasticfilesystem:DeleteReplicationConfiguration',
        'elasticfilesystem:UpdateFileSystemProtection',
      ],
      resources: [fileSystems],
      conditions: taggedResource,
    }),
    new PolicyStatement({
      sid: 'EfsDriverTags',
      actions: ['elasticfilesystem:TagResource'],
      resources: [fileSystems],
      conditions: { ...taggedResource, 'ForAllValues:StringEquals': { 'aws:TagKeys': EFS_DRIVER_TAG_KEYS } },
    }),
    new PolicyStatement({
      sid: 'EfsDriverUntag',
      actions: ['elasticfilesystem:UntagResource'],
      resources: [fileSystems],
      conditions: { ...taggedResource, 'ForAllValues:StringEquals': { 'aws:TagKeys': EFS_DRIVER_UNTAG_KEYS } },
    }),
    // A share's security group: made with the backend tag in the backend's VPC; its NFS ingress and its deletion only on such a group.
    new PolicyStatement({ sid: 'EfsDescribeGroups', actions: ['ec2:DescribeSecurityGroups'], resources: ['*'] }),
    new PolicyStatement({ sid: 'EfsCreateGroup', actions: ['ec2:CreateSecurityGroup'], resources: [ec2Arn('security-group')], conditions: taggedRequest }),
    new PolicyStatement({ sid: 'EfsGroupVpc', actions: ['ec2:CreateSecurityGroup'], resources: [ec2Arn('vpc')] }),
    new PolicyStatement({
      sid: 'EfsGroupTagOnCreate',
      actions: ['ec2:CreateTags'],
      resources: [ec2Arn('security-group')],
      conditions: { ...taggedRequest, StringEquals: { 'ec2:CreateAction': 'CreateSecurityGroup' } },
    }),
    new PolicyStatement({
      sid: 'EfsFerryGroups',
      actions: ['ec2:AuthorizeSecurityGroupIngress', 'ec2:RevokeSecurityGroupIngress', 'ec2:UpdateSecurityGroupRuleDescriptionsIngress', 'ec2:DeleteSecurityGroup'],
      resources: [ec2Arn('security-group')],
      conditions: taggedResource,
    }),
    // What EFS does in EC2 for a mount target, authorized as its caller: the interface in the subnet, behind a Ferry group.
    new PolicyStatement({ sid: 'EfsMountTargetLookups', actions: ['ec2:DescribeSubnets', 'ec2:DescribeNetworkInterfaces'], resources: ['*'] }),
    new PolicyStatement({ sid: 'EfsMountTargetInterfaces', actions: ['ec2:CreateNetworkInterface', 'ec2:DeleteNetworkInterface'], resources: [ec2Arn('network-interface')] }),
    new PolicyStatement({ sid: 'EfsMountTargetSubnets', actions: ['ec2:CreateNetworkInterface'], resources: [ec2Arn('subnet')] }),
    new PolicyStatement({ sid: 'EfsMountTargetGroups', actions: ['ec2:CreateNetworkInterface'], resources: [ec2Arn('security-group')], conditions: taggedResource }),
  ];
}

/** Grants the share drivers' statements to a function that runs them, with cdk-nag's findings answered. */
export function grantShareDrivers(fn: IFunction): void {
  for (const s of efsDriverStatements()) fn.addToRolePolicy(s);
  Validations.of(fn).acknowledge({
    id: 'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:elasticfilesystem:*:<AWS::AccountId>:file-system/*]',
    reason: 'EFS file systems are made per share at run time, in the regions the inventory names; only those tagged ferry:backend (infra/aws/share-driver-permissions.ts, proven by test/infra/permissions.test.ts).',
  });
  for (const type of ['security-group', 'vpc', 'network-interface', 'subnet']) {
    Validations.of(fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:*:<AWS::AccountId>:${type}/*]`,
      reason: `Each share's security group, and the ${type === 'security-group' ? 'groups' : `${type}s`} of its mount targets, are named at run time by the inventory's VPC and subnets; groups only with the ferry:backend tag (infra/aws/share-driver-permissions.ts, proven by test/infra/permissions.test.ts).`,
    });
  }
}

/** Every driver grant a function's wiring asks for: the volume drivers', the share drivers'. */
export function grantDriverPermissions(fn: IFunction, f: Pick<FunctionWiring, 'callsVolumeDrivers' | 'callsShareDrivers'>): void {
  if (f.callsVolumeDrivers) grantVolumeDrivers(fn);
  if (f.callsShareDrivers) grantShareDrivers(fn);
}

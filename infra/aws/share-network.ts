/**
 * The network of the share storage (copy-worker.ts): where the functions that mount the share file
 * system and the copy task run, and the only ways out of it.
 *
 * - A VPC with isolated subnets only (2 AZs, no NAT, no internet route) and flow logs.
 * - Gateway endpoints for DynamoDB and S3 (free; S3 also serves ECR's image layers).
 * - Interface endpoints (private DNS on, each with its own group admitting HTTPS from its callers'
 *   group only), as the deployment needs them: always Step Functions for the functions (the share
 *   API starts machines from inside the VPC), CloudWatch Logs and ECR api + dkr for the task (its
 *   awslogs driver, its image pull); and, by the inventory (vpcApisFor), EFS, EC2 and ECS for the
 *   functions. Each costs about $14.60 a month in two AZs (docs/aws.md), so none is made that no
 *   call of this deployment needs.
 * - The functions' and the task's security groups: egress HTTPS only (the subnets have no internet
 *   route, so 443 reaches only the endpoints) and NFS, which the file system admits (copy-worker.ts).
 *
 * An interface endpoint serves its own region only: a backend in another region than the stack's
 * (an aws-efs backend's `region`, an aws-ebs backend's zone, a replication target) cannot be
 * reached from this VPC at all; its calls fail within the client bounds (functions/core/aws-http.ts).
 */
import { RemovalPolicy } from 'aws-cdk-lib';
import {
  FlowLogDestination,
  FlowLogTrafficType,
  GatewayVpcEndpointAwsService,
  InterfaceVpcEndpointAwsService,
  IpAddresses,
  Peer,
  Port,
  SecurityGroup,
  SubnetType,
  Vpc,
  type SubnetSelection,
} from 'aws-cdk-lib/aws-ec2';
import { LogGroup, type RetentionDays } from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import type { Inventory } from '../../functions/inventory/schema.js';

/** Where the functions and the task run: the isolated subnets. */
export const ISOLATED_SUBNETS: SubnetSelection = { subnetType: SubnetType.PRIVATE_ISOLATED };

/**
 * An AWS API the functions in the VPC call beyond what every share storage needs, by the inventory:
 * - `efs`: the aws-efs driver (file systems, mount targets, policies, replication);
 * - `ec2`: the aws-efs driver (a share's security group, the subnets of its mount targets) and the
 *   aws-ebs driver, which the reconciler and inventory-apply (both in the VPC) run;
 * - `ecs`: a migration's own copy task definition (aws-efs: migration-steps registers and
 *   deregisters it, the reconciler lists the families, functions/audit/copy-task-repairs.ts).
 */
export type VpcApi = 'efs' | 'ec2' | 'ecs';

/** The interface endpoint of each VpcApi, and of what every share storage needs; `functions` or `task` call it. */
const ENDPOINTS: Record<VpcApi | 'states' | 'logs' | 'ecrApi' | 'ecrDkr', { id: string; service: InterfaceVpcEndpointAwsService; callers: 'functions' | 'task' }> = {
  states: { id: 'States', service: InterfaceVpcEndpointAwsService.STEP_FUNCTIONS, callers: 'functions' },
  logs: { id: 'Logs', service: InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS, callers: 'task' },
  ecrApi: { id: 'EcrApi', service: InterfaceVpcEndpointAwsService.ECR, callers: 'task' },
  ecrDkr: { id: 'EcrDkr', service: InterfaceVpcEndpointAwsService.ECR_DOCKER, callers: 'task' },
  efs: { id: 'Efs', service: InterfaceVpcEndpointAwsService.ELASTIC_FILESYSTEM, callers: 'functions' },
  ec2: { id: 'Ec2', service: InterfaceVpcEndpointAwsService.EC2, callers: 'functions' },
  ecs: { id: 'Ecs', service: InterfaceVpcEndpointAwsService.ECS, callers: 'functions' },
};

/**
 * The VpcApis an inventory's backends make the functions in the VPC call. Without an inventory
 * (backends applied later by `ferry inventory apply`) none: deploy with `-c inventory=FILE` so
 * the VPC gets the endpoints its backends need.
 */
export function vpcApisFor(inventory: Inventory | undefined): VpcApi[] {
  if (!inventory) return [];
  const efs = inventory.shareBackends.some((b) => b.driver === 'aws-efs');
  const ebs = inventory.volumeBackends.some((b) => b.driver === 'aws-ebs');
  return [...(efs ? (['efs'] as const) : []), ...(efs || ebs ? (['ec2'] as const) : []), ...(efs ? (['ecs'] as const) : [])];
}

export interface ShareNetwork {
  readonly vpc: Vpc;
  /** The group of every function that mounts the share file system. */
  readonly functionSecurityGroup: SecurityGroup;
  /** The group of the copy task's ENI (RunTask passes it). */
  readonly taskSecurityGroup: SecurityGroup;
}

export function addShareNetwork(scope: Construct, logRetention: RetentionDays, apis: readonly VpcApi[]): ShareNetwork {
  const vpc = new Vpc(scope, 'Vpc', {
    ipAddresses: IpAddresses.cidr('10.42.0.0/16'),
    maxAzs: 2,
    natGateways: 0,
    subnetConfiguration: [{ name: 'isolated', subnetType: SubnetType.PRIVATE_ISOLATED, cidrMask: 20 }],
    // Nothing is placed in the default group (every ENI here gets its own); restricting it would
    // add a custom-resource Lambda to the stack for no gain.
    restrictDefaultSecurityGroup: false,
    flowLogs: {
      all: {
        trafficType: FlowLogTrafficType.ALL,
        destination: FlowLogDestination.toCloudWatchLogs(new LogGroup(scope, 'FlowLogs', { retention: logRetention, removalPolicy: RemovalPolicy.DESTROY })),
      },
    },
  });
  vpc.addGatewayEndpoint('DynamoDb', { service: GatewayVpcEndpointAwsService.DYNAMODB });
  vpc.addGatewayEndpoint('S3', { service: GatewayVpcEndpointAwsService.S3 });

  // Egress is explicit: HTTPS to AWS APIs (interface endpoints by address, DynamoDB and S3 by
  // gateway prefix list, whose ids are not known at synth without a lookup); NFS is added by the
  // file system's connections.
  const clientGroup = (id: string, description: string) => {
    const sg = new SecurityGroup(scope, id, { vpc, description, allowAllOutbound: false });
    sg.addEgressRule(Peer.anyIpv4(), Port.tcp(443), 'HTTPS to AWS APIs through the VPC endpoints (no internet route)');
    return sg;
  };
  const functionSecurityGroup = clientGroup('FunctionSg', 'Ferry functions that mount the share file system');
  const taskSecurityGroup = clientGroup('TaskSg', 'Ferry copy worker tasks');

  // The functions' logs and X-Ray segments leave through the Lambda service, not the VPC.
  for (const key of ['states', 'logs', 'ecrApi', 'ecrDkr', ...apis] as const) {
    const { id, service, callers } = ENDPOINTS[key];
    const caller = callers === 'functions' ? functionSecurityGroup : taskSecurityGroup;
    const endpoint = vpc.addInterfaceEndpoint(id, { service, subnets: ISOLATED_SUBNETS, privateDnsEnabled: true, open: false });
    endpoint.connections.allowDefaultPortFrom(caller, `HTTPS from ${caller.node.id}`);
  }
  return { vpc, functionSecurityGroup, taskSecurityGroup };
}

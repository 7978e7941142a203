/**
 * Starting and reading state machine executions through the Step Functions API. On AWS the
 * machine ARNs come from FERRY_SM_<NAME> (set by CDK); locally FERRY_SFN_ENDPOINT points the same
 * client at the local stack's Step Functions endpoint, which runs the same ASL files.
 *
 * Execution names are derived from the operation id, so a retried request cannot start a second
 * execution of the same operation: StartExecution with an existing name and the same input
 * returns the existing execution.
 */
import type { SFNClient } from '@aws-sdk/client-sfn';
import { DependencyError } from './errors.js';
import { stateMachineEnvName, type StateMachineName } from './machines.js';

let client: SFNClient | undefined;

/** The Step Functions SDK module: loaded on first use, so a function that starts nothing never imports it (cold start). */
export type SfnSdk = typeof import('@aws-sdk/client-sfn');
let sdk: Promise<SfnSdk> | undefined;
export const sfnSdk = (): Promise<SfnSdk> => (sdk ??= import('@aws-sdk/client-sfn'));

/** The process-wide client. */
export async function sfn(): Promise<SFNClient> {
  if (!client) {
    const endpoint = process.env.FERRY_SFN_ENDPOINT;
    const { SFNClient: Client } = await sfnSdk();
    client ??= new Client({
      region: process.env.AWS_REGION ?? 'us-east-1',
      ...(endpoint ? { endpoint, credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' } } : {}),
    });
  }
  return client;
}

export function setSfn(c: SFNClient | undefined): void {
  client = c;
}

export function stateMachineArn(name: StateMachineName): string {
  const fromEnv = process.env[stateMachineEnvName(name)];
  if (fromEnv) return fromEnv;
  const region = process.env.AWS_REGION ?? 'us-east-1';
  return `arn:aws:states:${region}:000000000000:stateMachine:ferry-${name}`;
}

/** Execution names allow 80 chars of [A-Za-z0-9-_]. */
export function executionName(operation: string, id: string): string {
  return `${operation}-${id}`.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 80);
}

/** The ARN Step Functions gives an execution: the machine's ARN with `execution` and the name. */
export function executionArnOf(machine: StateMachineName, name: string): string {
  return stateMachineArn(machine).replace(':stateMachine:', ':execution:') + ':' + name;
}

/**
 * Starts the operation's execution, or finds the one already started for it. Step Functions
 * answers a repeated name with the running execution (same input) or ExecutionAlreadyExists
 * (finished, or other input); either way the name is the operation, so it is the same execution.
 */
export async function startExecution(machine: StateMachineName, name: string, input: unknown): Promise<string> {
  try {
    const out = await (await sfn()).send(new (await sfnSdk()).StartExecutionCommand({ stateMachineArn: stateMachineArn(machine), name, input: JSON.stringify(input) }));
    return out.executionArn!;
  } catch (e) {
    if ((e as { name?: string }).name === 'ExecutionAlreadyExists') return executionArnOf(machine, name);
    throw e;
  }
}

export async function describeExecution(executionArn: string) {
  return (await sfn()).send(new (await sfnSdk()).DescribeExecutionCommand({ executionArn }));
}

export type ExecutionStatus = 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'TIMED_OUT' | 'ABORTED';

/**
 * The status of the machine's execution of that name, or undefined when no such execution exists
 * (ExecutionDoesNotExist). Any other failure is a DependencyError: a Step Functions that cannot
 * answer is no proof that the execution is absent.
 */
export async function executionStatus(machine: StateMachineName, name: string): Promise<ExecutionStatus | undefined> {
  const executionArn = executionArnOf(machine, name);
  try {
    const out = await describeExecution(executionArn);
    return out.status as ExecutionStatus;
  } catch (e) {
    if ((e as { name?: string }).name === 'ExecutionDoesNotExist') return undefined;
    throw new DependencyError(`could not read execution ${executionArn}: ${(e as Error).message}`, { cause: e, context: { executionArn } });
  }
}

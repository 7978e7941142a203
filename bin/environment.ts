/**
 * Where `ferry` talks to and what goes wrong on the way, in words: the running local stack of the
 * data directory (its stack.json) or a deployed stack (FERRY_TABLE_*, AWS credentials), and the
 * one-line explanation of an AWS SDK or network error with what to do.
 */
import { runningStack, type StackFile } from '../infra/local/data-dir-lock.js';
import { STEP_FUNCTIONS_PATH } from '../infra/local/http.js';

/**
 * With no endpoint configured, use the local stack running on this machine (`npm start` writes its
 * endpoints to <data dir>/stack.json), so `ferry audit` works in a second terminal as it is.
 */
export function useRunningLocalStack(): void {
  endpointFromStack = undefined;
  if (process.env.FERRY_DYNAMODB_ENDPOINT || process.env.FERRY_TABLE_VOLUME) return;
  // Only the stack that holds the data directory now: a stack.json left by one killed -9 names a dead endpoint.
  const stack = runningStack(dataDir()) as ({ sfnEndpoint?: string } & StackFile) | undefined;
  if (!stack) return;
  if (stack.dynamodbEndpoint) {
    process.env.FERRY_DYNAMODB_ENDPOINT = stack.dynamodbEndpoint;
    endpointFromStack = stack;
  }
  if (stack.s3Endpoint) process.env.FERRY_S3_ENDPOINT = stack.s3Endpoint;
  // A stack started with FERRY_TABLE_PREFIX named its tables by it.
  if (stack.tablePrefix) process.env.FERRY_TABLE_PREFIX ??= stack.tablePrefix;
  // --repair asks Step Functions whether an operation's execution exists: the stack serves it under its URL.
  const sfnEndpoint = stack.sfnEndpoint ?? (stack.url ? `${stack.url}${STEP_FUNCTIONS_PATH}` : undefined);
  if (sfnEndpoint && !process.env.FERRY_SFN_ENDPOINT) process.env.FERRY_SFN_ENDPOINT = sfnEndpoint;
}

export function dataDir(): string {
  return process.env.FERRY_DATA_DIR ?? '.ferry';
}

/** Where the command talks to, in words. */
export function where(): string {
  if (process.env.FERRY_DYNAMODB_ENDPOINT) return `DynamoDB at ${process.env.FERRY_DYNAMODB_ENDPOINT}`;
  const table = process.env.FERRY_TABLE_VOLUME ?? process.env.FERRY_TABLE_TOKENS;
  if (table) return `the deployed stack's table ${table} in ${awsRegion()}`;
  return `FERRY_DATA_DIR=${process.env.FERRY_DATA_DIR ?? '.ferry'}`;
}

export function awsRegion(): string {
  return process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1';
}

/** The running stack whose stack.json gave the DynamoDB endpoint (not the operator), if one did. */
let endpointFromStack: StackFile | undefined;

const NETWORK_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'EPIPE']);
const REFUSED_CREDENTIALS = new Set(['UnrecognizedClientException', 'InvalidSignatureException', 'ExpiredTokenException', 'ExpiredToken', 'InvalidClientTokenId', 'SignatureDoesNotMatch']);

export function errorName(e: unknown): string {
  return (e as { name?: string } | undefined)?.name ?? 'Error';
}

/** The first line of an error's message (SDK messages can run to several). */
export function firstLine(e: unknown): string {
  const message = (e as { message?: unknown } | undefined)?.message;
  return (typeof message === 'string' ? message : String(e)).split('\n')[0]!.trim();
}

/**
 * What an error from the AWS SDK (or the network under it) means for the operator, and what to
 * do about it, in one line; undefined for an error this does not recognise. Follows `cause`.
 */
export function explainError(e: unknown): string | undefined {
  for (let err = e as { name?: string; code?: string; address?: string; port?: number; cause?: unknown } | undefined, depth = 0; err && depth < 5; err = err.cause as typeof err, depth++) {
    const name = err.name ?? '';
    const code = typeof err.code === 'string' ? err.code : '';
    if (name === 'CredentialsProviderError' || /could not load credentials/i.test(firstLine(err))) {
      return (
        'no AWS credentials found: for a deployed stack set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) and AWS_REGION; ' +
        `for the local stack start one with \`npm start\` (FERRY_DATA_DIR=${dataDir()}) and unset FERRY_TABLE_*`
      );
    }
    if (NETWORK_ERRORS.has(code) || name === 'TimeoutError') {
      const at = err.address ? ` at ${err.address}${err.port ? `:${err.port}` : ''}` : '';
      const why = code || name;
      if (endpointFromStack && endpointFromStack.dynamodbEndpoint === process.env.FERRY_DYNAMODB_ENDPOINT) {
        const pid = endpointFromStack.pid ? ` (pid ${endpointFromStack.pid})` : '';
        return (
          `the local stack of FERRY_DATA_DIR=${dataDir()}${pid} runs but its DynamoDB does not answer${at} (${why}): ` +
          'if it is not stopping, stop it (Ctrl-C where it runs) and start it again with `npm start`'
        );
      }
      if (process.env.FERRY_DYNAMODB_ENDPOINT) {
        return `nothing answers${at || ` at ${process.env.FERRY_DYNAMODB_ENDPOINT}`} (${why}): start the local stack with \`npm start\` and unset FERRY_DYNAMODB_ENDPOINT (ferry finds a running stack by itself), or set it to a DynamoDB that runs`;
      }
      return `cannot reach AWS${at} (${why}): check the network, and AWS_REGION (${awsRegion()})`;
    }
    if (name === 'ResourceNotFoundException') {
      const named = Object.keys(process.env).filter((k) => k.startsWith('FERRY_TABLE_') && k !== 'FERRY_TABLE_PREFIX').sort();
      if (process.env.FERRY_DYNAMODB_ENDPOINT && named.length === 0) {
        return `a table ferry needs is missing (${firstLine(err)}): is that DynamoDB a Ferry stack's? start one with \`npm start\` and unset FERRY_DYNAMODB_ENDPOINT`;
      }
      return (
        `a table ferry needs does not exist in ${awsRegion()} (${firstLine(err)}): set ${named.length ? named.join(', ') : 'FERRY_TABLE_VOLUME and the other FERRY_TABLE_*'} ` +
        "to the deployed stack's table names (its outputs TableName*), and AWS_REGION to its region"
      );
    }
    if (REFUSED_CREDENTIALS.has(name)) {
      return `AWS refused the credentials (${name}: ${firstLine(err)}): check AWS_PROFILE or the access keys, and that they belong to the stack's account`;
    }
    if (name === 'AccessDeniedException' || name === 'AccessDenied') {
      return `the credentials may not do this (${name}: ${firstLine(err)}): use a role allowed to read and write the stack's tables`;
    }
  }
  return undefined;
}

/** The AWS SDK's Node-version warning is not a command's output: the stack's own switch (infra/local/quiet-sdk.ts). bin/ferry.mjs does the same before it loads this module. */
export { quietAwsSdk } from '../infra/local/quiet-sdk.js';

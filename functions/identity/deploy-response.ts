/**
 * CloudFormation's side of a Lambda-backed custom resource: the function is the resource's service
 * token itself (no Provider framework, so the stack gains no Lambda of its own for it), and it
 * answers CloudFormation by PUTting the result to the presigned `ResponseURL` of the event. Until
 * that PUT arrives CloudFormation waits (an hour), so every outcome, a failure above all, is sent.
 * A PUT that fails is thrown: Lambda's asynchronous invocation runs the handler again (twice), and
 * the work before it is idempotent.
 */
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';

/** The body CloudFormation expects at `ResponseURL` (the custom resource response object). */
export interface CustomResourceResponse {
  Status: 'SUCCESS' | 'FAILED';
  /** Shown in the stack's events when Status is FAILED. */
  Reason?: string;
  PhysicalResourceId: string;
  StackId: string;
  RequestId: string;
  LogicalResourceId: string;
  Data?: Record<string, string>;
}

/** CloudFormation shows at most 4 KB of a whole response; the reason is cut well under it. */
const MAX_REASON = 1000;

/** The response could not be delivered to CloudFormation. */
export class CustomResourceResponseError extends Error {
  override readonly name = 'CustomResourceResponseError';
  constructor(
    message: string,
    readonly context: { status?: number; logicalResourceId: string },
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export type PutResponse = (url: string, body: string) => Promise<{ status: number }>;

/** The presigned S3 URL signs no Content-Type: send none (an empty one), as cfn-response does. */
const fetchPut: PutResponse = async (url, body) => {
  const res = await fetch(url, { method: 'PUT', body, headers: { 'content-type': '' } });
  await res.body?.cancel();
  return { status: res.status };
};

export function responseTo(
  event: CloudFormationCustomResourceEvent,
  physicalResourceId: string,
  outcome: { data?: Record<string, string> } | { error: Error },
): CustomResourceResponse {
  const common = { PhysicalResourceId: physicalResourceId, StackId: event.StackId, RequestId: event.RequestId, LogicalResourceId: event.LogicalResourceId };
  if ('error' in outcome) return { Status: 'FAILED', Reason: `${outcome.error.name}: ${outcome.error.message}`.slice(0, MAX_REASON), ...common };
  return { Status: 'SUCCESS', ...common, ...(outcome.data ? { Data: outcome.data } : {}) };
}

/** @throws CustomResourceResponseError when the PUT fails or is refused. */
export async function sendResponse(url: string, response: CustomResourceResponse, put: PutResponse = fetchPut): Promise<void> {
  let status: number;
  try {
    ({ status } = await put(url, JSON.stringify(response)));
  } catch (e) {
    throw new CustomResourceResponseError(`the response to CloudFormation was not delivered: ${(e as Error).message}`, { logicalResourceId: response.LogicalResourceId }, { cause: e });
  }
  if (status < 200 || status >= 300) {
    throw new CustomResourceResponseError(`CloudFormation's response URL answered HTTP ${status}`, { status, logicalResourceId: response.LogicalResourceId });
  }
}

/**
 * The in-process Step Functions client (infra/local/sfn-in-process.ts) the reconciler uses at stack
 * start, before the HTTP server listens: the SDK's requests reach the local endpoint's handle()
 * with their target and body, and its answers (errors included) come back as the SDK's.
 */
import { DescribeExecutionCommand } from '@aws-sdk/client-sfn';
import { describe, expect, test } from 'vitest';
import { inProcessSfnClient } from '../../infra/local/sfn-in-process.js';

const ARN = 'arn:aws:states:us-east-1:000000000000:execution:ferry-server-resize:op-1';

describe('inProcessSfnClient', () => {
  test('a request reaches handle() with its target and JSON body; the answer is the SDK output', async () => {
    const seen: { target?: string; body: string }[] = [];
    const client = inProcessSfnClient({
      async handle(target, body) {
        seen.push({ target, body });
        return { status: 200, body: { executionArn: ARN, status: 'RUNNING', startDate: 1_700_000_000 } };
      },
    });

    const out = await client.send(new DescribeExecutionCommand({ executionArn: ARN }));

    expect(seen).toEqual([{ target: 'AWSStepFunctions.DescribeExecution', body: JSON.stringify({ executionArn: ARN }) }]);
    expect(out.status).toBe('RUNNING');
    expect(out.startDate).toEqual(new Date(1_700_000_000_000));
  });

  test('an error answer is thrown as the SDK\'s named error (what executionStatus tells "no execution" by)', async () => {
    const client = inProcessSfnClient({
      async handle() {
        return { status: 400, body: { __type: 'ExecutionDoesNotExist', message: `Execution Does Not Exist: '${ARN}'` } };
      },
    });

    const error = await client.send(new DescribeExecutionCommand({ executionArn: ARN })).catch((e: Error) => e);

    expect(error).toMatchObject({ name: 'ExecutionDoesNotExist', message: `Execution Does Not Exist: '${ARN}'` });
  });
});

/**
 * infra/local/http.ts's Lambda context: one container per function in the local stack's process,
 * so the names and the log stream stay the same over a function's invocations (as a warm Lambda
 * container's do, and made once rather than per request), while each invocation has its own
 * request id and deadline.
 */
import { describe, expect, it } from 'vitest';
import { lambdaContext } from '../../infra/local/http.js';
import type { FunctionWiring } from '../../functions/wiring.js';

const fn = (name: string): FunctionWiring => ({ name, kind: 'api', entry: 'functions/x.ts', export: 'handler', description: name, tables: [], timeoutSeconds: 10, memoryMb: 256 });

describe('lambdaContext', () => {
  it('keeps a function container\'s names and log stream over invocations, with a request id and deadline of each its own', () => {
    // Prepare
    const volumes = fn('ctx-test-volumes');
    // Act
    const first = lambdaContext(volumes);
    const second = lambdaContext(volumes);
    const other = lambdaContext(fn('ctx-test-shares'));
    // Assess
    expect(second.logStreamName).toBe(first.logStreamName);
    expect(first.logStreamName).toMatch(/^\d{4}\/\d{2}\/\d{2}\/\[\$LATEST\][0-9a-f]{32}$/);
    expect(other.logStreamName).not.toBe(first.logStreamName);
    expect(second.awsRequestId).not.toBe(first.awsRequestId);
    expect(first).toMatchObject({ functionName: 'ferry-ctx-test-volumes', logGroupName: '/aws/lambda/ferry-ctx-test-volumes', memoryLimitInMB: '256', functionVersion: '$LATEST' });
    expect(first.invokedFunctionArn).toMatch(/:function:ferry-ctx-test-volumes$/);
    expect(first.getRemainingTimeInMillis()).toBeGreaterThan(9_000);
    expect(first.getRemainingTimeInMillis()).toBeLessThanOrEqual(10_000);
  });
});

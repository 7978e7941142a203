/**
 * A Step Functions client that calls the local Step Functions in this process, not over HTTP: the
 * reconciler's run at start asks whether an operation's execution exists before the HTTP server
 * listens (so that no request starts anything while the previous process's leftovers are repaired).
 * The requests and answers are the same JSON the `/_aws/stepfunctions` endpoint carries.
 */
import { SFNClient } from '@aws-sdk/client-sfn';
import type { StepFunctionsEndpoint } from './http.js';
import { localRegion } from './http.js';

interface JsonRequest {
  headers: Record<string, string>;
  body?: unknown;
}

export function inProcessSfnClient(stepFunctions: StepFunctionsEndpoint): SFNClient {
  return new SFNClient({
    region: localRegion(),
    // Never contacted: the request handler below answers every request.
    endpoint: 'http://stepfunctions.in-process.invalid',
    credentials: { accessKeyId: 'ferry', secretAccessKey: 'ferry' },
    maxAttempts: 1,
    requestHandler: {
      async handle(request: JsonRequest) {
        const target = Object.entries(request.headers).find(([k]) => k.toLowerCase() === 'x-amz-target')?.[1];
        const body = typeof request.body === 'string' ? request.body : request.body === undefined ? '' : Buffer.from(request.body as Uint8Array).toString('utf8');
        const out = await stepFunctions.handle(target, body);
        return {
          response: {
            statusCode: out.status,
            headers: { 'content-type': 'application/x-amz-json-1.0' },
            body: new TextEncoder().encode(JSON.stringify(out.body)),
          },
        };
      },
    },
  });
}

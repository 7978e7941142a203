/**
 * The HTTP API in front of the api functions of the wiring table: one route pair (`<prefix>` and
 * `<prefix>/{proxy+}`) per api function behind the one token authorizer, public GET routes for
 * version discovery, access logs to CloudWatch, default route throttling on the stage.
 */
import { CfnOutput, Duration, RemovalPolicy, Stack, Validations } from 'aws-cdk-lib';
import { HttpApi, HttpMethod, HttpStage, LogGroupLogDestination } from 'aws-cdk-lib/aws-apigatewayv2';
import { HttpLambdaAuthorizer, HttpLambdaResponseType } from 'aws-cdk-lib/aws-apigatewayv2-authorizers';
import { HttpLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import { AccessLogFormat } from 'aws-cdk-lib/aws-apigateway';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import { LogGroup, type RetentionDays } from 'aws-cdk-lib/aws-logs';
import { substitutionKey, type FunctionWiring } from '../../functions/wiring.js';

/** The header the HTTP API passes to the authorizer (the OpenStack clients send it). */
export const AUTH_HEADER = 'X-Auth-Token';
/** The one stage; its name is also the `Stage` dimension of the API's metrics (monitoring.ts). */
export const HTTP_STAGE_NAME = '$default';

/**
 * Default route throttling of the stage, requests per second and burst. Without it one client in
 * a loop could take the whole regional API Gateway quota (shared by every API of the account) and
 * the account's Lambda concurrency. Ferry's callers are OpenStack CLIs and operators' tools, well
 * under 100 requests per second (each write starts a state machine); a client over the limit gets
 * 429 Too Many Requests. Override with `-c apiRateLimit=N -c apiBurstLimit=N`.
 */
export const API_RATE_LIMIT = 100;
export const API_BURST_LIMIT = 200;
export const API_RATE_LIMIT_CONTEXT = 'apiRateLimit';
export const API_BURST_LIMIT_CONTEXT = 'apiBurstLimit';

/** A limit from the context (a number, or the CLI's string), or the default; the burst is a whole number. */
function limitFromContext(stack: Stack, key: string, fallback: number, whole: boolean): number {
  const raw: unknown = stack.node.tryGetContext(key);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0 || (whole && !Number.isInteger(n))) {
    throw new Error(`context ${key} must be a positive ${whole ? 'whole ' : ''}number, not ${String(raw)}`);
  }
  return n;
}

const pascal = (name: string) => substitutionKey(name).slice(2);

/** The API, or undefined when the wiring has no api function. */
export function addHttpApi(stack: Stack, wiring: readonly FunctionWiring[], deployed: ReadonlyMap<string, IFunction>, logRetention: RetentionDays): HttpApi | undefined {
  const apis = wiring.filter((f) => f.kind === 'api');
  if (apis.length === 0) return undefined;
  const authorizers = wiring.filter((f) => f.kind === 'authorizer');
  if (authorizers.length !== 1) {
    throw new Error(`functions/wiring.ts: the HTTP API needs exactly one function of kind 'authorizer', found ${authorizers.length}.`);
  }
  const authorizer = new HttpLambdaAuthorizer('TokenAuthorizer', deployed.get(authorizers[0]!.name)!, {
    responseTypes: [HttpLambdaResponseType.SIMPLE],
    identitySource: [`$request.header.${AUTH_HEADER}`],
    // Off: a revoked or expired token must stop working at once, not after a cache period.
    resultsCacheTtl: Duration.seconds(0),
  });
  const api = new HttpApi(stack, 'HttpApi', { apiName: `${stack.stackName}-api`, createDefaultStage: false });
  const accessLogs = new LogGroup(stack, 'HttpApiAccessLogs', { retention: logRetention, removalPolicy: RemovalPolicy.DESTROY });
  const stage = new HttpStage(stack, 'HttpApiStage', {
    httpApi: api,
    stageName: HTTP_STAGE_NAME,
    autoDeploy: true,
    throttle: {
      rateLimit: limitFromContext(stack, API_RATE_LIMIT_CONTEXT, API_RATE_LIMIT, false),
      burstLimit: limitFromContext(stack, API_BURST_LIMIT_CONTEXT, API_BURST_LIMIT, true),
    },
    accessLogSettings: {
      destination: new LogGroupLogDestination(accessLogs),
      format: AccessLogFormat.jsonWithStandardFields(),
    },
  });

  for (const f of apis) {
    if (!f.httpPrefix) throw new Error(`functions/wiring.ts: api function ${f.name} has no httpPrefix.`);
    const integration = new HttpLambdaIntegration(`Integration${pascal(f.name)}`, deployed.get(f.name)!);
    for (const path of [f.httpPrefix, `${f.httpPrefix}/{proxy+}`]) {
      if (!f.authenticatesItself) {
        api.addRoutes({ path, methods: [HttpMethod.ANY], integration, authorizer });
        continue;
      }
      // The identity API checks tokens itself (functions/api/identity.ts says why): no authorizer.
      for (const route of api.addRoutes({ path, methods: [HttpMethod.ANY], integration })) {
        Validations.of(route).acknowledge({
          id: 'AwsSolutions-APIG4',
          reason: `${path} is the identity API (${f.name}): issuing a token takes none, and every other call's X-Auth-Token is validated by the function itself against the token table, answering Keystone's 401 body.`,
        });
      }
    }
    // A function that authenticates itself has every path routed already, public ones included.
    for (const publicPath of f.authenticatesItself ? [] : (f.publicPaths ?? [])) {
      // Version discovery answers without a token, as upstream does (clients call it before authenticating).
      const routes = api.addRoutes({ path: publicPath.replace(/\/+$/, '') || '/', methods: [HttpMethod.GET], integration });
      for (const route of routes) {
        Validations.of(route).acknowledge({
          id: 'AwsSolutions-APIG4',
          reason: `GET ${publicPath} is version discovery, public in the reference API (the OpenStack clients call it before they have a token); it returns no tenant data.`,
        });
      }
    }
  }
  new CfnOutput(stack, 'ApiUrl', { value: stage.url, description: 'Base URL of the HTTP API (the cinder endpoint is <ApiUrl>volume/v3)' });
  return api;
}

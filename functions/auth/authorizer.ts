/**
 * The HTTP API's Lambda authorizer (payload format 2.0, simple responses). It reads
 * `X-Auth-Token` and answers who the caller is; handlers read the result from
 * `requestContext.authorizer.lambda` (functions/core/auth.ts).
 *
 * FERRY_AUTH_MODE=noauth (the local stack's default) accepts the upstream noauth convention
 * `user:project`; otherwise the token must be in the token table.
 */
import { parseNoAuthToken, type AuthorizerContext } from '../core/auth.js';
import { lookupToken } from './tokens.js';

export interface AuthorizerEvent {
  headers?: Record<string, string | undefined>;
}

export interface AuthorizerResult {
  isAuthorized: boolean;
  context?: AuthorizerContext;
}

export async function authorize(event: AuthorizerEvent): Promise<AuthorizerResult> {
  const headers = Object.fromEntries(Object.entries(event.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]));
  const token = headers['x-auth-token'];
  if (!token) return { isAuthorized: false };
  const context = process.env.FERRY_AUTH_MODE === 'noauth' ? parseNoAuthToken(token) : await lookupToken(token);
  return context ? { isAuthorized: true, context } : { isAuthorized: false };
}

export const handler = authorize;

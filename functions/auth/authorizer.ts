/**
 * The HTTP API's Lambda authorizer (payload format 2.0, simple responses). It reads
 * `X-Auth-Token` and answers who the caller is; handlers read the result from
 * `requestContext.authorizer.lambda` (functions/core/auth.ts).
 *
 * The token must be in the token table (a Keystone token from /identity, or one of `ferry token
 * create`). FERRY_AUTH_MODE=noauth (the local stack's default) also accepts the upstream noauth
 * convention `user:project`, colon included.
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
  const token = noauthMode() ? percentDecodedNoAuth(headers['x-auth-token']) : headers['x-auth-token'];
  if (!token) return { isAuthorized: false };
  // A noauth token names a project after its colon; an identity token never has one. Anything else
  // (`notused`, a bare `admin`) is refused in both modes, as a real deployment would refuse it.
  const noauth = noauthMode() && token.includes(':');
  const context = noauth ? parseNoAuthToken(token) : await lookupToken(token);
  return context ? { isAuthorized: true, context } : { isAuthorized: false };
}

const noauthMode = () => process.env.FERRY_AUTH_MODE === 'noauth';

/**
 * glanceclient percent-encodes every header value, so `demo:demo` arrives as `demo%3Ademo`. A
 * token with no colon but an encoded one is read decoded; an identity token is base64url and never
 * holds a `%`. Local only: on AWS no token is a noauth token.
 */
function percentDecodedNoAuth(token: string | undefined): string | undefined {
  if (!token || token.includes(':') || !/%3a/i.test(token)) return token;
  try {
    return decodeURIComponent(token);
  } catch {
    return token; // malformed escapes: left as sent, and refused below as no token of either kind
  }
}

export const handler = authorize;

/**
 * Who is calling. On AWS the HTTP API's Lambda authorizer (functions/auth) puts the caller in
 * `requestContext.authorizer.lambda`; the local stack runs the same authorizer and fills the same
 * field, so handlers never look at tokens themselves.
 */
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { Unauthorized } from './errors.js';

export interface AuthContext {
  userId: string;
  projectId: string;
  isAdmin: boolean;
  roles: string[];
}

/** The fields the authorizer returns as its context (all strings: API Gateway flattens context). */
export interface AuthorizerContext {
  userId: string;
  projectId: string;
  roles: string;
}

type EventWithAuthorizer = APIGatewayProxyEventV2 & {
  requestContext: APIGatewayProxyEventV2['requestContext'] & { authorizer?: { lambda?: Partial<AuthorizerContext> } };
};

export function authFromEvent(event: APIGatewayProxyEventV2): AuthContext {
  const ctx = (event as EventWithAuthorizer).requestContext.authorizer?.lambda;
  if (!ctx?.userId || !ctx.projectId) throw new Unauthorized();
  const roles = (ctx.roles ?? '').split(',').filter(Boolean);
  return { userId: ctx.userId, projectId: ctx.projectId, roles, isAdmin: roles.includes('admin') };
}

/**
 * The upstream noauth convention (cinder/manila NoAuthMiddleware): `X-Auth-Token: user:project`,
 * project defaults to the user; admin when the user is `admin`.
 */
export function parseNoAuthToken(token: string | undefined): AuthorizerContext | undefined {
  if (!token) return undefined;
  const i = token.indexOf(':');
  const userId = (i < 0 ? token : token.slice(0, i)).trim();
  const projectId = (i < 0 ? userId : token.slice(i + 1)).trim() || userId;
  if (!userId) return undefined;
  return { userId, projectId, roles: userId === 'admin' ? 'admin,member,reader' : 'member,reader' };
}

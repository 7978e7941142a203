/**
 * The Glance v2 REST API (image-api in functions/wiring.ts) at `/image`: version discovery, images,
 * image data, schemas (functions/images/routes.ts). Glance's errors are webob's: with `Accept:
 * application/json` the body is `{"message", "code": "404 Not Found", "title"}`, otherwise the
 * plain-text page `404 Not Found\n\n<message>\n\n   ` (webob.exc's json and plain templates).
 */
import { STATUS_CODES } from 'node:http';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { createPlainApiHandler, type PlainResponse } from '../core/plain-api.js';
import { FerryError } from '../core/errors.js';
import { IMAGE_ROUTES } from '../images/routes.js';

export function glanceError(e: FerryError, event: Pick<APIGatewayProxyEventV2, 'headers'>): PlainResponse {
  const title = STATUS_CODES[e.status] ?? 'Error';
  const status = `${e.status} ${title}`;
  const accept = event.headers?.accept ?? '';
  if (/application\/json/i.test(accept)) return { status: e.status, body: { message: e.message, code: status, title } };
  return { status: e.status, body: `${status}\n\n${e.message}\n\n   ` };
}

export const routes = IMAGE_ROUTES;

export const handler = createPlainApiHandler({
  rootPath: '/image',
  routes: IMAGE_ROUTES,
  errorResponse: glanceError,
  methodNotAllowed: () => new FerryError(405, 'badRequest', 'The method specified is not allowed for this resource.'),
});

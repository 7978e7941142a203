/**
 * The `ops-api` Lambda: Ferry's own routes under /ferry (the operator console and the operations
 * it shows), functions/ops/routes.ts.
 */
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { handleFerryRequest } from '../ops/routes.js';

export async function handler(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> {
  return handleFerryRequest(event);
}

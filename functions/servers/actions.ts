/**
 * `POST /servers/{id}/action`: the body's one key names the action. Each flow registers its
 * actions here (name -> handler with its policy); routes.ts dispatches, after loading the server
 * the caller may see.
 */
import type { ApiRequest, ApiResponse } from '../core/api.js';
import type { LoadedServer } from './repo.js';

export interface ServerActionSpec {
  /** The policy checked against the server's project before the handler runs. */
  policy: string;
  minVersion?: string;
  handler: (req: ApiRequest, server: LoadedServer, args: unknown) => Promise<ApiResponse>;
}

export const SERVER_ACTIONS: Record<string, ServerActionSpec> = {};

export function registerServerActions(actions: Record<string, ServerActionSpec>): void {
  Object.assign(SERVER_ACTIONS, actions);
}

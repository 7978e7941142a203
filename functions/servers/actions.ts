/**
 * `POST /servers/{id}/action`: the body's one key names the action. Each flow's api.ts declares
 * its actions (name -> handler with its policy); routes.ts composes them and dispatches, after
 * loading the server the caller may see.
 */
import type { ApiRequest, ApiResponse } from '../core/api.js';
import type { LoadedServer } from './repo.js';

export interface ServerActionSpec {
  /** The policy checked against the server's project before the handler runs. */
  policy: string;
  minVersion?: string;
  /** Runs on a locked instance for anyone (Nova's check_instance_lock is absent: evacuate, lock, unlock). */
  ignoresLock?: boolean;
  handler: (req: ApiRequest, server: LoadedServer, args: unknown) => Promise<ApiResponse>;
}

/**
 * Ports of the compute foundation: what the os-services API needs from the servers layer above
 * it, answered by whatever the entry point registers. The compute code never imports the servers
 * code; the Nova API handler (api/compute.ts) registers the implementation when it loads.
 */
import { ConfigurationError } from '../core/errors.js';

/** What happens on a compute host that comes back (its service no longer forced down). */
export interface ComputeHostRestart {
  /**
   * Nova's `_destroy_evacuated_instances`: the guests evacuated away from `host` while it was down
   * are destroyed there. Returns the uuids destroyed.
   */
  cleanupEvacuatedGuests(host: string): Promise<string[]>;
}

let registered: ComputeHostRestart | undefined;

/** Called by an entry point when it loads; a later registration replaces an earlier one (all register the same one). */
export function registerComputeHostRestart(impl: ComputeHostRestart): void {
  registered = impl;
}

/** The registered ComputeHostRestart; a ConfigurationError when no entry point registered one. */
export function getComputeHostRestart(): ComputeHostRestart {
  if (!registered) {
    throw new ConfigurationError('No ComputeHostRestart port is registered: the entry point must call registerComputeHostRestart (functions/compute/ports.ts) before os-services updates run.');
  }
  return registered;
}

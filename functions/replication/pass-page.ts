/**
 * The page of a replication pass (pass.ts), in a module of its own with no imports: the pass's
 * page step asks the driver for this many volumes, and infra/asl/policy.ts sizes the replication
 * machine's pages by it.
 */

/** Replicated volumes per page step: at the driver's few EC2 calls each, well inside the step's 300 s. */
export const PASS_PAGE_VOLUMES = 50;

/**
 * The size of a failover's batch (one Map item of volume-failover, one Batch step), in a module of
 * its own with no imports: the batch step (steps.ts) switches this many volumes, and
 * infra/asl/policy.ts sizes the machine's Map (and so its worst case) by it. One source for both.
 */

/** DynamoDB's limit of items in one TransactWriteItems. */
export const MAX_TRANSACTION_ITEMS = 100;

/** Volumes one transaction of a batch switches: every transaction also carries its slot's progress count. */
export const VOLUMES_PER_TRANSACTION = MAX_TRANSACTION_ITEMS - 1;

/**
 * Volumes per Map item: two full transactions (written side by side), few enough for one step to
 * finish well inside its timeout, many enough to keep the history small. It was 200, which split
 * every batch into transactions of 99, 99 and 2: 150 transactions for 10,000 volumes where 102 do.
 */
export const FAILOVER_BATCH_SIZE = 2 * VOLUMES_PER_TRANSACTION;

/**
 * The failure-injection suites (a step made to fail, its compensation checked) have more rows than
 * `npm test`'s 20-minute budget holds: each cross-cell row builds a server and resizes it twice
 * (20-40 s). `npm test` runs a representative row of each layer (the source, the destination, the
 * last step before success); `npm run test:failures` sets FERRY_ALL_FAILURE_ROWS=1 and runs every
 * row. The rows left out show as skipped in `npm test`'s report, never silently.
 */
import { test } from 'vitest';

export const ALL_FAILURE_ROWS = process.env.FERRY_ALL_FAILURE_ROWS === '1';

/** A row `npm test` skips and `npm run test:failures` runs. */
export const fullRunRow = test.runIf(ALL_FAILURE_ROWS);

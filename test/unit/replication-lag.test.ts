/** The pass's lag tally and how the pools show it (functions/drivers/volume/replication-lag.ts). */
import { describe, expect, it } from 'vitest';
import { LagTally, lagCapability, worthRecording } from '../../functions/drivers/volume/replication-lag.js';

describe('replication lag per target', () => {
  it('counts the volumes with a replica and keeps the largest lag among them', () => {
    // Prepare
    const tally = new LagTally(['frankfurt', 'virginia']);

    // Act: three volumes; the second has no copy in Virginia yet.
    tally.add('frankfurt', 4_000);
    tally.add('virginia', 9_000);
    tally.add('frankfurt', 61_400);
    tally.add('virginia', null);
    tally.add('frankfurt', -5); // a clock a little behind the snapshot's: no negative lag
    tally.add('virginia', 1_000);
    const summary = tally.summary(Date.UTC(2026, 10, 25, 8, 0, 0));

    // Assess
    expect(summary.targets).toEqual([
      { targetBackendId: 'frankfurt', volumes: 3, replicated: 3, maxLagMs: 61_400 },
      { targetBackendId: 'virginia', volumes: 3, replicated: 2, maxLagMs: 9_000 },
    ]);
    expect(lagCapability(summary)).toEqual({
      frankfurt: { volumes: 3, replicated: 3, max_lag_seconds: 61, as_of: '2026-11-25T08:00:00.000Z' },
      virginia: { volumes: 3, replicated: 2, max_lag_seconds: 9, as_of: '2026-11-25T08:00:00.000Z' },
    });
  });

  it('a target no volume has reached shows no lag rather than zero, and nothing is shown before the first pass', () => {
    // Prepare
    const tally = new LagTally(['frankfurt']);

    // Act
    tally.add('frankfurt', null);

    // Assess
    expect(lagCapability(tally.summary(0))?.frankfurt).toMatchObject({ volumes: 1, replicated: 0, max_lag_seconds: null });
    expect(lagCapability(undefined)).toBeUndefined();
    expect(() => tally.add('tokyo', 1)).toThrow(/not a target/);
  });

  it('a pass is written when a count or the shown lag moved, or the last record is a minute old; not every second', () => {
    // Prepare
    const lag = (at: number, replicated: number, maxLagMs: number | null) => ({ at, targets: [{ targetBackendId: 'site-b', volumes: 2, replicated, maxLagMs }] });
    const last = lag(0, 2, 400);

    // Act / Assess
    expect(worthRecording(undefined, lag(1_000, 2, 300))).toBe(true);
    expect(worthRecording(last, lag(1_000, 2, 300))).toBe(false);
    expect(worthRecording(last, lag(1_000, 1, 300))).toBe(true);
    expect(worthRecording(last, lag(1_000, 2, 2_600))).toBe(true);
    expect(worthRecording(last, lag(60_000, 2, 400))).toBe(true);
  });
});

/**
 * A replicated backend's lag per target, summed by a replication pass over the backend's
 * replicated volumes: how many there are, how many have a replica on the target (a failover there
 * now brings those up; the others go to error), and the largest lag among those (what a failover
 * now would lose). The pass records it on the backend item (volumes/backends.ts) and
 * `cinder get-pools --detail` shows it as the pool capability `replication_lag`, so an operator or
 * a smoke test can see a new volume's first replica arrive before failing over.
 *
 * Measured when the pass ran (`at`): a reader adds the time since then.
 */

export interface TargetLag {
  targetBackendId: string;
  /** Replicated volumes the pass found on the backend. */
  volumes: number;
  /** Of those, the ones with a replica on the target. */
  replicated: number;
  /** The largest lag among the replicated ones when the pass ran; null when none has a replica. */
  maxLagMs: number | null;
}

export interface BackendLag {
  /** When the pass that measured it ended (epoch ms). */
  at: number;
  targets: TargetLag[];
}

/** One pass's tally: each volume adds, per target, its lag or null (no replica there yet). */
export class LagTally {
  private readonly byTarget = new Map<string, TargetLag>();

  /** `carried`: the tally of the pages before this one (the replication-pass machine keeps it in its state between steps). */
  constructor(targetBackendIds: readonly string[], carried: readonly TargetLag[] = []) {
    for (const id of targetBackendIds) this.byTarget.set(id, { targetBackendId: id, volumes: 0, replicated: 0, maxLagMs: null });
    for (const t of carried) if (this.byTarget.has(t.targetBackendId)) this.byTarget.set(t.targetBackendId, { ...t });
  }

  add(targetBackendId: string, lagMs: number | null): void {
    const t = this.byTarget.get(targetBackendId);
    if (!t) throw new Error(`LagTally: ${targetBackendId} is not a target of this backend`);
    t.volumes += 1;
    if (lagMs === null) return;
    t.replicated += 1;
    t.maxLagMs = Math.max(t.maxLagMs ?? 0, Math.max(0, lagMs));
  }

  summary(at: number): BackendLag {
    return { at, targets: [...this.byTarget.values()].map((t) => ({ ...t })) };
  }
}

/** How often an unchanged measurement is written again, so `as_of` stays recent. */
export const LAG_REFRESH_MS = 60_000;

/**
 * Whether a pass's measurement is worth a write after the one last recorded: a replica count moved,
 * the largest lag moved by a second or more (what the pools show), or the record is LAG_REFRESH_MS
 * old. A loop that passes every second then writes when something an operator sees changed.
 */
export function worthRecording(previous: BackendLag | undefined, next: BackendLag, refreshMs = LAG_REFRESH_MS): boolean {
  if (!previous || next.at - previous.at >= refreshMs || previous.targets.length !== next.targets.length) return true;
  const seconds = (ms: number | null) => (ms === null ? null : Math.round(ms / 1000));
  return next.targets.some((t, i) => {
    const p = previous.targets[i]!;
    return p.targetBackendId !== t.targetBackendId || p.volumes !== t.volumes || p.replicated !== t.replicated || seconds(p.maxLagMs) !== seconds(t.maxLagMs);
  });
}

/**
 * The pool capability `replication_lag`: per target, the volumes with a replica of all replicated
 * ones and the largest lag in seconds as of the pass (`as_of`). Absent before the first pass.
 */
export function lagCapability(lag: BackendLag | undefined): Record<string, { volumes: number; replicated: number; max_lag_seconds: number | null; as_of: string }> | undefined {
  if (!lag) return undefined;
  const asOf = new Date(lag.at).toISOString();
  return Object.fromEntries(
    lag.targets.map((t) => [t.targetBackendId, { volumes: t.volumes, replicated: t.replicated, max_lag_seconds: t.maxLagMs === null ? null : Math.round(t.maxLagMs / 1000), as_of: asOf }]),
  );
}

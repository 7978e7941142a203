/** Small statistics helpers for benchmarks: percentiles over recorded samples. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export const fmt = (ms: number) => `${ms.toFixed(2)} ms`;

export class Recorder {
  readonly samples = new Map<string, number[]>();
  async time<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      const list = this.samples.get(name) ?? [];
      list.push(performance.now() - t0);
      this.samples.set(name, list);
    }
  }
  count(): number {
    let n = 0;
    for (const s of this.samples.values()) n += s.length;
    return n;
  }
}

/**
 * The lines `npm start` prints while it starts (issue 16): one per stage as it ends, with how long
 * it took and when it ended counted from the process's start, so a slow start says where its time
 * goes (a first start's JVM on a busy machine, a reconcile with much to repair) instead of staying
 * silent until "ferry ready". Stages that run side by side each print their own line.
 *
 *   ferry: lock                    2 ms  (at 0.21 s)
 *   ferry: DynamoDB Local       2310 ms  (at 2.62 s)
 *
 * The stack's tests pass no stages (`NO_STAGES`): they print nothing.
 */
import { performance } from 'node:perf_hooks';

export type StageLog = (line: string) => void;

export interface StartStages {
  /**
   * Runs `work` as stage `name` and prints its line when it settles, with what `detail` says of
   * the result (a failed stage says so, and the error goes on).
   */
  run<T>(name: string, work: () => Promise<T> | T, detail?: (result: T) => string): Promise<T>;
}

const NAME_WIDTH = 18;

/** Stages printed through `log`; times count from the process's start (performance.timeOrigin). */
export function startStages(log: StageLog): StartStages {
  const at = () => `(at ${(performance.now() / 1000).toFixed(2)} s)`;
  const line = (name: string, text: string) => log(`ferry: ${name.padEnd(NAME_WIDTH)} ${text}`);
  return {
    async run(name, work, detail) {
      const t0 = performance.now();
      const ms = () => `${Math.round(performance.now() - t0)} ms`.padStart(8);
      try {
        const result = await work();
        line(name, `${ms()}  ${at()}${detail ? ` ${detail(result)}` : ''}`);
        return result;
      } catch (e) {
        // Said here so the failing stage is named; the error itself is the caller's to report.
        line(name, `${ms()}  ${at()} failed`);
        throw e;
      }
    },
  };
}

/** No lines: the stages only run. */
export const NO_STAGES: StartStages = {
  run: async (_name, work) => work(),
};

/**
 * The AWS history count of an execution, from the interpreter's event log (infra/local/history-count.ts):
 * a small machine run by aws-local-stepfunctions, its history counted by hand from AWS's event types.
 */
import { StateMachine } from 'aws-local-stepfunctions';
import { describe, expect, it } from 'vitest';
import { HistoryCounter, type InterpreterEvent } from '../../infra/local/history-count.js';

const definition = {
  StartAt: 'Batches',
  States: {
    Batches: {
      Type: 'Map',
      ItemsPath: '$.items',
      MaxConcurrency: 2,
      ItemProcessor: {
        StartAt: 'Step',
        States: { Step: { Type: 'Task', Resource: 'arn:aws:lambda:us-east-1:123456789012:function:step', Retry: [{ ErrorEquals: ['States.ALL'], IntervalSeconds: 0, MaxAttempts: 3 }], End: true } },
      },
      Next: 'Copy',
    },
    Copy: { Type: 'Task', Resource: 'arn:aws:states:::ecs:runTask.sync', Next: 'Pause' },
    Pause: { Type: 'Wait', Seconds: 0, Next: 'Done' },
    Done: { Type: 'Succeed' },
  },
};

async function countOf(failuresPerItem: number): Promise<number> {
  const attempts = new Map<number, number>();
  const run = new StateMachine(definition as never).run({ items: [1, 2] }, {
    overrides: {
      taskResourceLocalHandlers: {
        Step: async (input) => {
          const n = (attempts.get(input as number) ?? 0) + 1;
          attempts.set(input as number, n);
          if (n <= failuresPerItem) throw new Error('not yet');
          return input;
        },
        Copy: async (input) => input,
      },
    },
  });
  const counter = new HistoryCounter(new Set(['Copy']));
  const drained = (async () => {
    for await (const e of run.eventLogs) counter.add(e as InterpreterEvent);
  })();
  await run.result;
  await drained;
  return counter.events;
}

describe('AWS history events counted from the interpreter', () => {
  it('counts each Task attempt, the Map and its iterations, a .sync task and the plain states as AWS would', async () => {
    // By hand, AWS's history of a run where every Step succeeds at once:
    //   ExecutionStarted 1; MapStateEntered + MapStateStarted 2;
    //   per item: MapIterationStarted, TaskStateEntered, TaskScheduled, TaskStarted, TaskSucceeded, TaskStateExited, MapIterationSucceeded = 7 (x2 = 14);
    //   MapStateSucceeded + MapStateExited 2; Copy: Entered, Scheduled, Started, Submitted, Succeeded, Exited = 6;
    //   WaitStateEntered/Exited 2; SucceedStateEntered/Exited 2; ExecutionSucceeded 1.
    expect(await countOf(0)).toBe(1 + 2 + 14 + 2 + 6 + 2 + 2 + 1);
  });

  it('a retried attempt adds its Scheduled, Started and Failed', async () => {
    // Each item fails twice before it succeeds: two more attempts of three events each, per item.
    expect(await countOf(2)).toBe(30 + 2 * 2 * 3);
  });
});

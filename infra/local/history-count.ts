/**
 * How many events AWS Step Functions would write in an execution's history for what the local
 * interpreter did, counted from aws-local-stepfunctions' event log as the execution runs. AWS ends
 * a Standard execution that reaches 25,000 history events; counting here lets a test (and the
 * local stack's log) show that a machine stays under it before it is deployed.
 *
 * The mapping, per AWS's HistoryEvent types (Step Functions developer guide, "Execution history"):
 * - the execution: ExecutionStarted, and one of ExecutionSucceeded / Failed / Aborted / TimedOut;
 * - a Task visit: TaskStateEntered, per attempt TaskScheduled, TaskStarted and TaskSucceeded or
 *   TaskFailed (a `.sync` integration adds TaskSubmitted), TaskStateExited; a retry is another
 *   attempt, a caught failure still exits;
 * - a Map or Parallel state: Entered, Started, then Succeeded (or Failed) and Exited; each Map
 *   iteration MapIterationStarted and MapIterationSucceeded (or Failed); the states inside an inline
 *   Map's iterations are in the same history;
 * - any other state (Pass, Wait, Choice, Succeed, Fail): Entered and Exited.
 * The interpreter's log gives StateEntered once per visit, StateFailed per failed attempt,
 * StateRetried per retry, StateCaught, StateExited, and the Map iteration events.
 */

/** AWS's hard limit of history events per Standard execution. */
export const AWS_HISTORY_LIMIT = 25_000;

/** The part of an aws-local-stepfunctions event log entry the count needs. */
export interface InterpreterEvent {
  type: string;
  state?: { name: string; type: string };
}

export class HistoryCounter {
  private count = 0;

  /** @param syncTasks names of Task states whose resource is a `.sync` integration (the copy task). */
  constructor(private readonly syncTasks: ReadonlySet<string> = new Set()) {}

  get events(): number {
    return this.count;
  }

  add(event: InterpreterEvent): void {
    this.count += awsEventsFor(event, this.syncTasks);
  }
}

/** The AWS history events one interpreter event stands for. */
export function awsEventsFor(event: InterpreterEvent, syncTasks: ReadonlySet<string> = new Set()): number {
  const type = event.state?.type;
  const attempt = type === 'Task' ? (event.state && syncTasks.has(event.state.name) ? 4 : 3) : 0;
  switch (event.type) {
    case 'ExecutionStarted':
    case 'ExecutionSucceeded':
    case 'ExecutionFailed':
    case 'ExecutionAborted':
    case 'ExecutionTimeout':
    case 'MapIterationStarted':
    case 'MapIterationSucceeded':
    case 'MapIterationFailed':
      return 1;
    case 'StateEntered':
      // The first attempt of a Task whole (its outcome is one of its events); Map/Parallel Started.
      if (type === 'Task') return 1 + attempt;
      return type === 'Map' || type === 'Parallel' ? 2 : 1;
    case 'StateRetried':
      return attempt;
    case 'StateExited':
      return type === 'Map' || type === 'Parallel' ? 2 : 1;
    case 'StateFailed':
      // A Task's failed attempt is already counted; a Map or Parallel failing is MapStateFailed.
      return type === 'Map' || type === 'Parallel' ? 1 : 0;
    default:
      // StateCaught, ParallelBranch*: no event of their own in AWS's history.
      return 0;
  }
}

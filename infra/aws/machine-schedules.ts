/**
 * The machines the wiring table starts on a schedule (`scheduleRateMinutes` in
 * functions/wiring-machines.ts: the replication schedule): one EventBridge Scheduler schedule each,
 * its target the machine with `{"scheduledTime": <aws.scheduler.scheduled-time>}` as input (the
 * replication fan-out names each backend's pass by it, so a delivery repeated by Scheduler starts
 * no second pass). The target's role, made by the L2 target, may only states:StartExecution that
 * machine. No flexible window: a pass every rate, on time. A delivery that fails is retried twice
 * within the rate, then dropped: the next one is due anyway.
 */
import { Duration } from 'aws-cdk-lib';
import { ContextAttribute, Schedule, ScheduleExpression, ScheduleTargetInput, TimeWindow } from 'aws-cdk-lib/aws-scheduler';
import { StepFunctionsStartExecution } from 'aws-cdk-lib/aws-scheduler-targets';
import type { IStateMachine } from 'aws-cdk-lib/aws-stepfunctions';
import type { Construct } from 'constructs';
import type { StateMachineWiring } from '../../functions/wiring.js';

/** Scheduler's retries of a failed delivery: a few, since the next scheduled one comes within the rate. */
export const SCHEDULE_DELIVERY_RETRIES = 2;

export function addMachineSchedules(scope: Construct, machines: readonly StateMachineWiring[], machineOf: (name: string) => IStateMachine): Schedule[] {
  return machines
    .filter((m) => m.scheduleRateMinutes !== undefined)
    .map((m) => {
      const rate = Duration.minutes(m.scheduleRateMinutes!);
      return new Schedule(scope, `Schedule${m.name.split('-').map((p) => p.charAt(0).toUpperCase() + p.slice(1)).join('')}`, {
        description: `Starts ${m.name} every ${m.scheduleRateMinutes} minutes`,
        schedule: ScheduleExpression.rate(rate),
        timeWindow: TimeWindow.off(),
        target: new StepFunctionsStartExecution(machineOf(m.name), {
          input: ScheduleTargetInput.fromObject({ scheduledTime: ContextAttribute.scheduledTime }),
          retryAttempts: SCHEDULE_DELIVERY_RETRIES,
          maxEventAge: rate,
        }),
      });
    });
}

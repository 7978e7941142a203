/**
 * The image-import machine (statemachines/image-import.asl.json) as the image API and the
 * reconciler see it: one execution per import task, named after the task, so a retried start finds
 * the one already started, and "is this import still running" is one DescribeExecution.
 */
import { executionName, executionStatus, startExecution, type ExecutionStatus } from '../core/executions.js';

export const IMAGE_IMPORT_MACHINE = 'image-import' as const;

/** The machine's input, as the API starts it and docs/state-machines.md documents it. */
export interface ImageImportInput {
  imageId: string;
  taskId: string;
}

/** `image-import-<task id>`: one execution per import, ever. */
export const imageImportExecutionName = (taskId: string): string => executionName(IMAGE_IMPORT_MACHINE, taskId);

/** Starts the import's execution, or finds the one already started. Returns its ARN; a failed start throws. */
export function startImageImport(input: ImageImportInput): Promise<string> {
  return startExecution(IMAGE_IMPORT_MACHINE, imageImportExecutionName(input.taskId), input);
}

/** The status of the import's execution, undefined when it never started. @throws DependencyError when Step Functions cannot say */
export function imageImportStatus(taskId: string): Promise<ExecutionStatus | undefined> {
  return executionStatus(IMAGE_IMPORT_MACHINE, imageImportExecutionName(taskId));
}

/** One Powertools logger for the process; the service name says which function logs. */
import { Logger } from '@aws-lambda-powertools/logger';

export const logger = new Logger({
  serviceName: process.env.FERRY_SERVICE ?? 'ferry',
  logLevel: (process.env.FERRY_LOG_LEVEL ?? (process.env.VITEST ? 'CRITICAL' : 'INFO')) as 'INFO',
});

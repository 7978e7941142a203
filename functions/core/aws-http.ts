/**
 * The HTTP bounds of the clients Ferry makes for AWS control-plane APIs called from a function:
 * EFS and EC2 (the aws-efs share driver, the aws-ebs volume driver) and ECS (a migration's own copy
 * task definitions). Without them a call that gets no answer waits as long as Lambda lets it: a
 * function in the share storage's isolated VPC reaches an AWS API only through that VPC's interface
 * endpoints (infra/aws/share-network.ts), and an API with no endpoint there (another region's, or
 * one the deployment's inventory did not ask for) drops the connection attempt silently. With them
 * the attempt fails after the connection bound, the SDK retries it (a TimeoutError is transient to
 * its standard retry: 3 attempts), and the caller gets its typed error (DriverError carrying
 * `TimeoutError` from a driver, BackendNotReady from the ECS calls) in seconds, long before
 * Lambda's timeout. The DynamoDB client has bounds of its own (db.ts).
 */

/** A TCP (and TLS) connection to an AWS API endpoint takes milliseconds; 3 s is far beyond it even from a cold Lambda. */
export const AWS_API_CONNECTION_TIMEOUT_MS = 3_000;
/** One control-plane request (a describe page, a create) answers in well under a second; 15 s bounds a stuck one. */
export const AWS_API_REQUEST_TIMEOUT_MS = 15_000;

export interface AwsApiHttpBounds {
  readonly connectionTimeout: number;
  readonly requestTimeout: number;
  /** Without it @smithy/node-http-handler 4.x only logs a warning when requestTimeout passes and goes on waiting. */
  readonly throwOnRequestTimeout: true;
}

export const AWS_API_HTTP_BOUNDS: AwsApiHttpBounds = {
  connectionTimeout: AWS_API_CONNECTION_TIMEOUT_MS,
  requestTimeout: AWS_API_REQUEST_TIMEOUT_MS,
  throwOnRequestTimeout: true,
};

/** The configuration of such a client: its region (none: the SDK's default) and the bounds above as the request handler's options. */
export function awsApiClientConfig(region?: string): { region?: string; requestHandler: AwsApiHttpBounds } {
  return { ...(region ? { region } : {}), requestHandler: { ...AWS_API_HTTP_BOUNDS } };
}

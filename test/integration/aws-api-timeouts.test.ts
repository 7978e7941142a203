/**
 * The clients Ferry makes for EFS, EC2 and ECS carry a connection and a request bound
 * (functions/core/aws-http.ts), so an API a function cannot reach (no interface endpoint for it in
 * the share storage's isolated VPC) fails in seconds with the caller's typed error instead of
 * hanging until Lambda's timeout: the aws-efs driver answers a DriverError carrying `TimeoutError`,
 * the ECS calls of a migration's copy task BackendNotReady. Against a real socket that reads every
 * request and answers none (as a dropped route does, past the connection).
 */
import { EFSClient } from '@aws-sdk/client-efs';
import { ECSClient, ListTaskDefinitionFamiliesCommand } from '@aws-sdk/client-ecs';
import type { EC2Client } from '@aws-sdk/client-ec2';
import { describe, expect, test } from 'vitest';
import { AWS_API_HTTP_BOUNDS, awsApiClientConfig } from '../../functions/core/aws-http.js';
import { BackendNotReady, DriverError } from '../../functions/core/errors.js';
import { AwsEfsShareDriver } from '../../functions/drivers/share/aws-efs.js';
import { AwsEbsVolumeDriver } from '../../functions/drivers/volume/aws-ebs.js';
import { ecs, ecsCall } from '../../functions/migration/copy-task-ecs.js';
import { efsBackend } from '../support/fake-efs.js';
import { useSilentServer } from '../support/silent-server.js';

const NAME = 'share-11111111-1111-4111-a111-111111111111';
const credentials = { accessKeyId: 'ferry', secretAccessKey: 'ferry' };
/** What a made client's request handler was configured with (NodeHttpHandler resolves its options once). */
const boundsOf = async (client: { config: { requestHandler: unknown } }) => (await (client.config.requestHandler as { configProvider: Promise<Record<string, unknown>> }).configProvider);

describe('the clients the drivers and the copy task steps make', () => {
  test('EFS and EC2 of the aws-efs driver, EC2 of the aws-ebs driver and the ECS client carry the connection and request bounds, the request bound thrown', async () => {
    const efsDriver = new AwsEfsShareDriver(efsBackend('ferry@efs-a'));
    const made = efsDriver as unknown as { efs(): Promise<EFSClient>; ec2(): Promise<EC2Client> };
    const ebs = new AwsEbsVolumeDriver({ host: 'ferry@ebs-a', driver: 'aws-ebs', availabilityZone: 'eu-west-1a', pools: [{ name: 'pool0', totalCapacityGb: 10 }], volumeBackendName: 'ebs-a' } as never);
    const ebsClient = await (ebs as unknown as { ec2Client(): Promise<EC2Client> }).ec2Client();
    for (const client of [await made.efs(), await made.ec2(), ebsClient, await ecs()]) {
      expect(await boundsOf(client)).toMatchObject({ ...AWS_API_HTTP_BOUNDS });
    }
    expect(await (await made.efs()).config.region()).toBe('eu-west-1');
    expect(await ebsClient.config.region()).toBe('eu-west-1');
  });
});

describe('an AWS API that never answers', () => {
  const server = useSilentServer();
  /** A client as Ferry makes it, pointed at the silent server, its request bound short enough for a test, one attempt. */
  const silent = () => ({ ...awsApiClientConfig('eu-west-1'), endpoint: server().endpoint, credentials, maxAttempts: 1, requestHandler: { ...AWS_API_HTTP_BOUNDS, requestTimeout: 300 } });

  test('the aws-efs driver answers a DriverError carrying TimeoutError, in seconds', async () => {
    const driver = new AwsEfsShareDriver(efsBackend('ferry@efs-a'), { efs: new EFSClient(silent()), pollIntervalMs: 0 });
    const started = Date.now();
    const e = await driver.shareUsage(NAME).then(() => undefined, (err: unknown) => err);
    expect(e).toBeInstanceOf(DriverError);
    expect((e as DriverError).context).toMatchObject({ operation: 'DescribeFileSystems', code: 'TimeoutError' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  test('an ECS call of the copy task steps answers BackendNotReady (the step runs again after its wait), in seconds', async () => {
    const client = new ECSClient(silent());
    const started = Date.now();
    const e = await ecsCall('ListTaskDefinitionFamilies', { prefix: 'f-m-' }, () => client.send(new ListTaskDefinitionFamiliesCommand({ familyPrefix: 'f-m-' }))).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(BackendNotReady);
    expect((e as Error).message).toMatch(/ECS ListTaskDefinitionFamilies .*TimeoutError/);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

/**
 * An EFS and an EC2 client of one region, mocked (aws-sdk-client-mock) and answered by a fresh
 * FakeEfs (fake-efs.ts): what a driver test hands the aws-efs driver. `restore` undoes the mocks.
 */
import { EC2Client } from '@aws-sdk/client-ec2';
import { EFSClient } from '@aws-sdk/client-efs';
import { mockClient } from 'aws-sdk-client-mock';
import { FAKE_EFS_REGION, FakeEfs, wireFakeEfs } from './fake-efs.js';

export function mockedEfsClients(region = FAKE_EFS_REGION): { efs: EFSClient; ec2: EC2Client; fake: FakeEfs; restore: () => void } {
  const efs = new EFSClient({ region });
  const ec2 = new EC2Client({ region });
  const efsMock = mockClient(efs);
  const ec2Mock = mockClient(ec2);
  const fake = new FakeEfs(region);
  wireFakeEfs(efsMock, ec2Mock, fake);
  return { efs, ec2, fake, restore: () => (efsMock.restore(), ec2Mock.restore()) };
}

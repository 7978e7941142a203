/**
 * The S3 client every function uses, created once per process from the environment, and the
 * bucket name. FERRY_S3_ENDPOINT points it at the local S3 server (s3rver); on AWS it is unset and
 * the SDK's defaults apply. FERRY_BUCKET names the bucket (CDK sets it; the local stack sets
 * `ferry-local`).
 */
import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3';

let client: S3Client | undefined;

export function s3ConfigFromEnv(): S3ClientConfig {
  const endpoint = process.env.FERRY_S3_ENDPOINT;
  const config: S3ClientConfig = { region: process.env.AWS_REGION ?? 'us-east-1' };
  if (endpoint) {
    config.endpoint = endpoint;
    // s3rver answers path-style requests only (no wildcard DNS for bucket subdomains).
    config.forcePathStyle = true;
    // Under the SDK default (WHEN_SUPPORTED) a streamed PutObject is sent with aws-chunked framing
    // and trailing checksums, which s3rver stores verbatim: the object would be silently corrupt.
    config.requestChecksumCalculation = 'WHEN_REQUIRED';
    // s3rver stores no checksums, so there is nothing to validate on the way back.
    config.responseChecksumValidation = 'WHEN_REQUIRED';
    // s3rver accepts any well-formed signature; fixed credentials keep the local stack self-contained.
    config.credentials = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
  }
  return config;
}

/** The S3 SDK module: loaded on first use, so a function that never touches the bucket never imports it (cold start). */
export type S3Sdk = typeof import('@aws-sdk/client-s3');
let sdk: Promise<S3Sdk> | undefined;
export const s3Sdk = (): Promise<S3Sdk> => (sdk ??= import('@aws-sdk/client-s3'));

/** The process-wide client. */
export async function s3(): Promise<S3Client> {
  if (!client) {
    const { S3Client: Client } = await s3Sdk();
    client ??= new Client(s3ConfigFromEnv());
  }
  return client;
}

/** Replace the process-wide client (tests, local stack restarts). */
export function setS3(c: S3Client | undefined): void {
  client = c;
}

/** The bucket for temporary snapshots and images. */
export function bucket(): string {
  const name = process.env.FERRY_BUCKET;
  if (!name) throw new Error('FERRY_BUCKET is not set (CDK sets it on AWS; the local stack sets it on start)');
  return name;
}

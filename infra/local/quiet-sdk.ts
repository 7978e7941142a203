/**
 * The AWS SDK prints a 9-line Node-version warning in every process that makes a client on Node 20
 * (issue 16: every `npm start` and every copy-worker child did). Its switch is
 * AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED (read by @aws-sdk/core when a client is made);
 * AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE is the older SDKs' (what .ci/run sets). Set unless
 * the operator set them; children given this environment inherit them.
 */
export function quietAwsSdk(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  env.AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE ??= '1';
  return env;
}

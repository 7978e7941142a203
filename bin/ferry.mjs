#!/usr/bin/env node
// The `ferry` command (package.json "bin"): registers tsx so Node can load the TypeScript CLI,
// then runs it. The CLI itself is bin/ferry.ts.
//
// First, for this process only (an operator's own setting wins): no AWS SDK Node-version warning
// in a command's output. @aws-sdk/core reads AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED;
// AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE is the older SDKs' switch (what .ci/run sets).
// bin/ferry.ts `quietAwsSdk` does the same when it runs directly (`npm run ferry`).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
process.env.AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE ??= '1';

// `ferry inventory show | head`: the reader went away; the command has nothing more to say.
process.stdout.on('error', (e) => {
  if (e.code === 'EPIPE') process.exit(0);
  throw e;
});

const { register } = await import('tsx/esm/api');
register();
const { main } = await import('./ferry.ts');
process.exitCode = await main(process.argv.slice(2));

/**
 * The CDK App the template tests build. Bundling every function with esbuild costs ~17 s per
 * synth and none of these tests reads a bundle (the ones that check a bundle's contents build it
 * themselves with the stack's options, and test/infra/cdk-cli.test.ts runs the real `cdk synth`
 * with bundling), so the app skips it: CDK's own `aws:cdk:bundling-stacks` context, the one
 * `cdk synth --exclusively` uses, set to no stack. The template is otherwise the same.
 */
import { App, type AppProps } from 'aws-cdk-lib';

/**
 * The timeout of a hook that builds and synthesizes one whole Ferry app (one synth per hook).
 * The first synth in a worker also sets up CDK's built-in CloudFormation validation (a
 * WebAssembly engine, ~15 CPU s, vitest.config.ts); alone at load 14 that synth took 79 s of wall
 * time, so the tier's default hook timeout (120 s) is too tight on a busy machine.
 */
export const SYNTH_HOOK_TIMEOUT_MS = 240_000;

export const SKIP_BUNDLING = { 'aws:cdk:bundling-stacks': [] as string[] };

export function testApp(props: AppProps = {}): App {
  return new App({ ...props, context: { ...SKIP_BUNDLING, ...props.context } });
}

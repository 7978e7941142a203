/**
 * The CDK App the template tests build. Bundling every function with esbuild costs ~17 s per
 * synth and none of these tests reads a bundle (the ones that check a bundle's contents build it
 * themselves with the stack's options, and test/infra/cdk-cli.test.ts runs the real `cdk synth`
 * with bundling), so the app skips it: CDK's own `aws:cdk:bundling-stacks` context, the one
 * `cdk synth --exclusively` uses, set to no stack. The template is otherwise the same.
 */
import { App, type AppProps } from 'aws-cdk-lib';

export const SKIP_BUNDLING = { 'aws:cdk:bundling-stacks': [] as string[] };

export function testApp(props: AppProps = {}): App {
  return new App({ ...props, context: { ...SKIP_BUNDLING, ...props.context } });
}

/**
 * cdk-nag's AwsSolutions pack over the whole app. Every finding is either fixed in the stack or
 * acknowledged there with a reason (Validations.of(...).acknowledge); this test fails on any
 * finding that is neither, and on any error or warning CDK itself annotated.
 */
import { type App, Stack } from 'aws-cdk-lib';
import { testApp } from '../support/cdk-app.js';
import { Annotations, Match } from 'aws-cdk-lib/assertions';
import { Bucket } from 'aws-cdk-lib/aws-s3';
import { AwsSolutionsChecks } from 'cdk-nag';
import { beforeAll, expect, test } from 'vitest';
import { buildFerryApp, type FerryStack } from '../../infra/aws/ferry-stack.js';

let app: App;
let stack: FerryStack;

beforeAll(() => {
  ({ app, stack } = buildFerryApp(testApp(), { nag: false }));
});

/** `severity rule at path` for every violation the pack reports under a scope. */
function nagFindings(scope: App): string[] {
  const report = new AwsSolutionsChecks().validateScope(scope);
  return report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.severity} ${v.ruleName} at ${r.constructPath}`));
}

test('AwsSolutionsChecks reports no unacknowledged error or warning', () => {
  expect(nagFindings(app)).toEqual([]);
});

test('CDK annotated no error and no warning on the stack', () => {
  const annotations = Annotations.fromStack(stack);
  expect(annotations.findError('*', Match.anyValue()).map((a) => `${a.id}: ${JSON.stringify(a.entry.data)}`)).toEqual([]);
  expect(annotations.findWarning('*', Match.anyValue()).map((a) => `${a.id}: ${JSON.stringify(a.entry.data)}`)).toEqual([]);
});

test('every acknowledgement gives a reason of at least a sentence', () => {
  const acks = stack.node.findAll().flatMap((c) => c.node.metadata.filter((m) => m.type === 'aws:cdk:acknowledged-rules').flatMap((m) => Object.entries(m.data as Record<string, string>)));
  expect(acks.length).toBeGreaterThan(0);
  expect(acks.filter(([, reason]) => reason.trim().length < 40)).toEqual([]);
});

test('the check does report what it is meant to catch (an unencrypted, unlogged bucket)', () => {
  const bare = testApp();
  new Bucket(new Stack(bare, 'Bare'), 'Open');
  expect(nagFindings(bare)).toEqual(expect.arrayContaining([expect.stringMatching(/^error AwsSolutions-S1 /), expect.stringMatching(/^error AwsSolutions-S10 /)]));
});

test('the app registers the pack as a synth-time plugin, so synth fails on a new finding', () => {
  const withPlugin = testApp();
  buildFerryApp(withPlugin);
  new Bucket(new Stack(withPlugin, 'Intruder'), 'Open');
  expect(() => withPlugin.synth()).toThrow(/AwsSolutions-S1/);
});

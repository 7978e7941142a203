/**
 * What test/e2e/aws-docs.test.ts checks of a docs/aws.md line it cannot run against the local
 * stack (an `aws` or `cdk` line, a mention of a subcommand): that it is well-formed by what is
 * on this machine, without AWS and without starting a client: the `aws` operation exists in the
 * service's API (the SDK's command list, or the API reference for services whose SDK package is
 * not installed here), the stack outputs and tags it names are the stack's, the `cdk` context keys
 * are ones the app reads and its inventory passes the AWS rules, a client's subcommand is defined
 * in that client's installed code.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseInventory } from '../../functions/inventory/schema.js';
import { readInventoryFile } from '../../infra/inventory-file.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export class DocLineMalformed extends Error {
  override name = 'DocLineMalformed';
}

function must(ok: unknown, why: string): void {
  if (!ok) throw new DocLineMalformed(why);
}

const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
const sourcesOf = (dir: string): string =>
  readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => read(join(dir, f)))
    .join('\n');

/** The `aws` services whose SDK package is installed: their operations are its command files. */
const SDK_PACKAGE: Record<string, string> = {
  ec2: 'client-ec2',
  efs: 'client-efs',
  ecs: 'client-ecs',
  stepfunctions: 'client-sfn',
  secretsmanager: 'client-secrets-manager',
  dynamodb: 'client-dynamodb',
};
/** Operations of services with no SDK package here, from their API references. */
const REFERENCE_OPERATIONS: Record<string, string[]> = {
  cloudformation: ['DescribeStacks'],
  sts: ['GetCallerIdentity'],
  sns: ['Subscribe'],
};
/** `aws s3` is the CLI's own high-level command set, not an API. */
const S3_COMMANDS = ['cp', 'ls', 'mb', 'mv', 'presign', 'rb', 'rm', 'sync', 'website'];

const pascal = (op: string) => op.split('-').map((w) => w[0]!.toUpperCase() + w.slice(1)).join('');

/** An `aws SERVICE OPERATION ...` line: the operation exists, and what it names of the stack is the stack's. */
export function checkAwsLine(command: string): void {
  const m = /(?:^|\$\(|\s)aws\s+([a-z0-9]+)\s+([a-z0-9-]+)/.exec(command);
  must(m, `no "aws SERVICE OPERATION" in: ${command}`);
  const [, service, operation] = m!;
  if (service === 's3') must(S3_COMMANDS.includes(operation!), `aws s3 has no command ${operation}`);
  else if (SDK_PACKAGE[service!]) {
    const file = join(ROOT, 'node_modules/@aws-sdk', SDK_PACKAGE[service!]!, 'dist-types/commands', `${pascal(operation!)}Command.d.ts`);
    must(existsSync(file), `aws ${service} has no operation ${operation} (no ${pascal(operation!)}Command in @aws-sdk/${SDK_PACKAGE[service!]})`);
  } else {
    must(REFERENCE_OPERATIONS[service!]?.includes(pascal(operation!)), `aws ${service} ${operation}: not an operation this test knows from the API reference`);
  }
  for (const [, key] of command.matchAll(/OutputKey=='([A-Za-z0-9]+)'/g)) must(stackOutputs().has(key!), `the stack has no output ${key}`);
  for (const [, name] of command.matchAll(/--stack-name\s+(\S+)/g)) must(name === stackName(), `the stack is named ${stackName()}, not ${name}`);
  for (const [, tag] of command.matchAll(/(ferry:[a-z-]+)/g)) must(driverSources().includes(`'${tag}'`), `no driver writes the tag ${tag}`);
  for (const [, machine] of command.matchAll(/stateMachine:[A-Za-z]+-([a-z-]+)/g)) must(existsSync(join(ROOT, 'statemachines', `${machine}.asl.json`)), `no state machine ${machine}`);
}

let outputs: Set<string> | undefined;
/** The stack's output ids: CfnOutput(…, 'Id') or CfnOutput(…, CONSTANT) with the constant's value; one per table. */
function stackOutputs(): Set<string> {
  if (outputs) return outputs;
  const src = sourcesOf('infra/aws');
  outputs = new Set<string>();
  for (const [, literal, constant] of src.matchAll(/new CfnOutput\([^,]+,\s*(?:'([A-Za-z0-9]+)'|([A-Z_]+))/g)) {
    if (literal) outputs.add(literal);
    const value = constant ? new RegExp(`const ${constant} = '([A-Za-z0-9]+)'`).exec(src)?.[1] : undefined;
    if (value) outputs.add(value);
  }
  return outputs;
}

function stackName(): string {
  return /options\.stackName \?\? '([A-Za-z0-9-]+)'/.exec(read('infra/aws/ferry-stack.ts'))![1]!;
}

let drivers: string | undefined;
const driverSources = () => (drivers ??= sourcesOf('functions/drivers'));

/** `npx cdk bootstrap|deploy|destroy [Ferry] [-c key=value ...]`: the CLI, the stack, the context keys, the inventory. */
export function checkCdkLine(command: string): void {
  const cli = JSON.parse(read('node_modules/aws-cdk/package.json')) as { version: string };
  must(cli.version.startsWith('2.'), `the cdk CLI here is ${cli.version}; the app's cloud assembly needs 2.x (TOOLCHAIN)`);
  must(JSON.parse(read('cdk.json')).app, 'cdk.json names no app');
  const m = /\bcdk\s+(bootstrap|deploy|destroy|synth)\b(.*)$/.exec(command.replace(/\s+#.*$/, ''));
  must(m, `not a cdk bootstrap/deploy/destroy/synth line: ${command}`);
  const rest = m![2]!.trim().split(/\s+/).filter(Boolean);
  const infra = sourcesOf('infra/aws');
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === '-c') {
      const [key, value] = rest[++i]!.split('=');
      must(infra.includes(`tryGetContext('${key}')`), `the app reads no context ${key}`);
      if (key === 'inventory' && value !== 'FILE') parseInventory(readInventoryFile(join(ROOT, value!)), 'aws');
      if (key === 'removalPolicy') must(['retain', 'destroy'].includes(value!), `removalPolicy ${value}`);
    } else {
      must(arg === stackName(), `the stack is named ${stackName()}, not ${arg}`);
    }
  }
}

/** Where each upstream client defines its subcommands (Debian's packages). */
const PY = '/usr/lib/python3/dist-packages';
const SHELLS: Record<string, string[]> = {
  cinder: [`${PY}/cinderclient/v3/shell.py`, `${PY}/cinderclient/v3/shell_base.py`],
  manila: [`${PY}/manilaclient/v2/shell.py`],
  nova: [`${PY}/novaclient/v2/shell.py`],
  glance: [`${PY}/glanceclient/v2/shell.py`],
};

/** `cli sub [args]`: `sub` is a subcommand of the client (its `do_sub` function, or openstack's entry point, or ferry's help). */
export function checkSubcommand(command: string): void {
  const words = command.split(/\s+/);
  const [cli, sub, sub2] = words;
  if (cli === 'openstack') {
    const entryPoints = readFileSync(`${PY}/python_openstackclient-6.0.0.egg-info/entry_points.txt`, 'utf8');
    const nouns = words.slice(1).filter((w) => !w.startsWith('-') && !w.startsWith('<'));
    // `openstack user set`, `openstack user password set`: entry point user_set, user_password_set.
    const found = [3, 2].some((n) => entryPoints.includes(`\n${nouns.slice(0, n).join('_')} =`));
    must(found, `openstack has no command "${nouns.slice(0, 3).join(' ')}"`);
  } else if (cli === 'ferry') {
    const help = read('bin/help.ts') + read('bin/ferry.ts');
    must(help.includes(`'${sub}'`) || help.includes(`ferry ${sub}`), `ferry has no subcommand ${sub}`);
    if (sub2 && !sub2.startsWith('-') && !sub2.startsWith('<')) must(help.includes(`ferry ${sub} ${sub2}`), `ferry ${sub} has no ${sub2}`);
  } else if (cli === 'npm') {
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
    if (sub === 'run') must(scripts[sub2!], `package.json has no script ${sub2}`);
    else must(['ci', 'install', 'start', 'test'].includes(sub!), `npm ${sub}`);
  } else {
    const files = SHELLS[cli!];
    must(files, `no subcommand check for ${cli}`);
    const fn = `def do_${sub!.replaceAll('-', '_')}(`;
    must(files!.some((f) => readFileSync(f, 'utf8').includes(fn)), `${cli} has no subcommand ${sub} (no ${fn} in ${files!.join(', ')})`);
  }
}

/**
 * docs/aws.md is true: every command line it shows a user (each line of its ```sh blocks, and each
 * inline `cinder …`, `aws …`, `ferry …` span of its prose) is either run here, in one bash, against
 * a fresh local stack (the same API, functions and CLIs; only the endpoint, the token and the
 * names of AWS things differ, by the substitutions of localNames() below, which the doc's comment
 * at its top lists), or listed in RULES as not runnable here, with the reason and a check that it
 * is well-formed (test/support/aws-doc-checks.ts). A line the doc gains that no rule covers fails
 * the test, and so does a rule that no longer covers any line.
 *
 * Order: the sections the others build on (a token, clouds.yaml, the CLI aliases) run first, as a
 * user reading the doc sets them up first; then every other line in the doc's order. A line whose
 * comment says what it shows "then" (`# importing, then active`) is typed again, as the user
 * would, until it shows that.
 *
 * Budget: `npm test` runs the coverage and well-formedness test and the lines of "Drive it with
 * the upstream CLIs" (the block `npm run smoke` reads its setup from) and `cinder manage` (QUICK_LINES),
 * with the local noauth token for the one the doc mints; `npm run test:aws-docs` (FERRY_AWS_DOCS_FULL=1) runs every line,
 * the token minting, the identity and image lines, the EFS walk-through and `npm run smoke` included.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { tableName } from '../../functions/core/tables.js';
import { clientEnv } from '../../scripts/smoke/cli.js';
import { checkAwsLine, checkCdkLine, checkSubcommand, ROOT } from '../support/aws-doc-checks.js';
import { docCommands, type DocCommand } from '../support/doc-commands.js';
import { eventually } from '../support/poll.js';
import { startShell, type ShellSession } from '../support/shell-session.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const DOC = join(ROOT, 'docs/aws.md');
const FULL = process.env.FERRY_AWS_DOCS_FULL === '1';
/** One line; the longest is a migration's progress typed until it says 100. */
const LINE_TIMEOUT_MS = 90_000;
/** The smoke test (every check), in npm run test:aws-docs. */
const SMOKE_TIMEOUT_MS = 600_000;
/** What npm test runs: the CLI setup block, and the lines of QUICK_LINES (the rest in npm run test:aws-docs). */
const QUICK = ['Drive it with the upstream CLIs'];
/** Lines outside that block that npm test runs too: manage, whose volume no other test makes through the doc. */
const QUICK_LINES = [/^cinder manage /];
/** The local backend's pool directory (under the stack's data dir: inventories/sandbox.yaml's ferry@lvm-a) and the file an operator puts there. */
const OPERATOR_VOLUME = 'backends/lvm-a/pool0';
const OPERATOR_VOLUME_NAME = 'operator-disk';
/** The sections the rest of the doc uses: a token, the clouds.yaml, the CLI setup. */
const FIRST = ['Mint a token', 'Identity (Keystone v3) and the openstack CLI', 'Drive it with the upstream CLIs'];
/**
 * The image the import line fetches: what the doc's cirros URL stands for (no internet here). A
 * real qcow2 (qemu-img), because the smoke test later boots a server from the first image listed.
 */
const IMAGE_FILE = join(tmpdir(), `ferry-aws-docs-${process.pid}.qcow2`);
execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', IMAGE_FILE, '1M']);
const IMAGE_BYTES = readFileSync(IMAGE_FILE);
const CIRROS = 'https://download.cirros-cloud.net/0.6.2/cirros-0.6.2-x86_64-disk.img';
const ALICE_PASSWORD = 'alice-doc-test-password';

interface Local {
  stack: TestLocalStack;
  importUrl: string;
  adminPassword: string;
  /** The admin token the doc's `token create --user ops … --admin` line printed. */
  opsToken?: string;
}

/** What a placeholder or an AWS name of the doc is on the local stack (docs/aws.md's top comment lists the same). */
function localNames(l: Local): [string, string][] {
  return [
    ['<ApiUrl>', `${l.stack.url}/`],
    ['<TableNameTokens output>', tableName('tokens')],
    // npm test does not mint one (the minting lines run in npm run test:aws-docs): the local noauth admin token.
    ['<token from ferry token create>', l.opsToken ?? 'admin:admin'],
    ['<admin token>', l.opsToken ?? 'admin:admin'],
    ["<the token's project>", 'admin'],
    ['<EC2 instance id>', 'smoke-host'],
    // The local stack seeds a project demo (the sandbox's users); a deployed stack has only admin.
    ['project create demo', 'project create docs-demo'],
    ['--project demo ', '--project docs-demo '],
    ['ferry@ebs-a', 'ferry@lvm-a'],
    ['ferry@ebs-rep --backend_id frankfurt', 'ferry@lvm-r --backend_id site-b'],
    ['share_backend_name=efs-a', 'share_backend_name=nfs-a'],
    ['share_backend_name=efs-b', 'share_backend_name=nfs-b'],
    ['ferry@efs-b#bursting', 'ferry@nfs-b#pool0'],
    [CIRROS, l.importUrl],
  ];
}

type Rule = {
  match: RegExp;
  /** Also matched against the line with its comment, where one command appears twice with different claims. */
  comment?: RegExp;
} & (
  | {
      run: true;
      /** The line as typed locally, when more than the names differ. */
      local?: (command: string, l: Local) => string;
      /** Typed again until its output matches (the doc's "then …"). */
      until?: RegExp;
      /** What its output must show. */
      shows?: RegExp[];
      after?: (output: string, l: Local) => void | Promise<void>;
      /** A smoke test's time rather than a line's. */
      long?: true;
    }
  | { awsOnly: string; check: (command: string) => void }
  | { notRun: string; check: (command: string) => void }
);

/** The command without its trailing comment (`ferry@efs-b#bursting` is no comment: a comment starts at " # "). */
const bare = (command: string) => command.replace(/\s+#\s.*$/, '');

/** Every command line of docs/aws.md, first rule that matches wins. */
const RULES: Rule[] = [
  // --- run against the local stack
  { match: /^export FERRY_TABLE_TOKENS=/, run: true },
  { match: /^npm run ferry -- token create --user alice /, run: true, shows: [/token: +\S+/, /expires: +20\d\d-/] },
  {
    match: /^npm run ferry -- token create --user ops --project admin --admin/,
    run: true,
    shows: [/roles: +admin/, /expires: +never/],
    after: (out, l) => {
      l.opsToken = /token: +(\S+)/.exec(out)![1];
    },
  },
  { match: /^PASSWORD=\$\(aws secretsmanager get-secret-value /, run: true, local: (_c, l) => `PASSWORD='${l.adminPassword}'` },
  { match: /^cat > clouds\.yaml <<YAML/, run: true },
  { match: /^chmod 600 clouds\.yaml$/, run: true },
  { match: /^export OS_CLIENT_CONFIG_FILE=/, run: true },
  { match: /^openstack --os-cloud ferry-aws token issue$/, run: true, shows: [/\| project_id +\| \S+/] },
  { match: /^openstack --os-cloud ferry-aws project create demo$/, run: true, shows: [/\| name +\| docs-demo /] },
  // --password-prompt reads from a terminal only (osc-lib refuses otherwise, and flushes what was typed ahead): the test gives the password as --password.
  { match: /^openstack --os-cloud ferry-aws user create --password-prompt /, run: true, local: (c) => c.replace('--password-prompt', `--password ${ALICE_PASSWORD}`), shows: [/\| name +\| alice /] },
  { match: /^openstack --os-cloud ferry-aws role add /, run: true },
  { match: /^export (FERRY_API|FERRY_TOKEN|FERRY_PROJECT|SETUPTOOLS_USE_DISTUTILS)=/, run: true },
  { match: /^alias (cinder|manila|nova)=/, run: true },
  { match: /^cinder create --name scratch 1$/, run: true, shows: [/\| name +\| scratch +\|/] },
  { match: /^manila pool-list$/, run: true, shows: [/ferry@nfs-a#pool0/] },
  { match: /^nova hypervisor-list$/, run: true, shows: [/cmp1/] },
  { match: /^(cinder list|cinder type-list|manila list|nova flavor-list)$/, run: true },
  { match: /^cinder get-pools --detail$/, run: true, shows: [/replication_lag/] },
  { match: /^cinder manageable-list ferry@ebs-a$/, run: true },
  { match: /^cinder failover-host ferry@ebs-rep --backend_id frankfurt$/, run: true },
  // A volume Ferry did not make, made as an operator makes one on the backend's storage: on EBS any
  // volume of the zone; on the local backend a file in a pool's directory (the driver's manage finds
  // it there by name, functions/drivers/volume/local-layout.ts). Then the doc's line, with its name.
  {
    match: /^cinder manage ferry@ebs-a <vol-id>$/,
    run: true,
    local: (c) => `mkdir -p "$FERRY_DATA_DIR/${OPERATOR_VOLUME}" && truncate -s 1G "$FERRY_DATA_DIR/${OPERATOR_VOLUME}/${OPERATOR_VOLUME_NAME}" && ${c.replace('<vol-id>', OPERATOR_VOLUME_NAME)}`,
    shows: [/\| os-vol-host-attr:host +\| ferry@lvm-a#pool0 /, /\| size +\| 1 /],
    after: (out, l) => managedAvailable(/\| id +\| (\S+) /.exec(out)![1]!, l),
  },
  { match: /^manila (type-create|access-allow|access-list|migration-start|migration-complete) /, run: true },
  { match: /^manila create NFS 100 --name data --share-type on-efs-a --wait$/, run: true, shows: [/\| status +\| available /] },
  // Local export locations are directories of the backend's root (on AWS, fs-ids).
  { match: /^manila share-export-location-list data$/, comment: /fs-….efs/, run: true, shows: [/\/shares\/nfs-a\/share-/] },
  { match: /^manila share-export-location-list data$/, comment: /the replica's fs-id now/, run: true, shows: [/\/shares\/nfs-b\/share-/] },
  { match: /^manila show data$/, run: true, until: /\| task_state +\| migration_success /, shows: [/\| host +\| ferry@nfs-b#pool0 /] },
  { match: /^manila migration-get-progress data/, run: true, until: /\| total_progress +\| 100 /, shows: [/migration_driver_phase1_done/] },
  // In a terminal, as the doc says: with no terminal on stdin, openstackclient uploads stdin as the image's data.
  { match: /^openstack --os-cloud ferry-aws image create .* big$/, run: true, local: (c) => `script -qec '${bare(c)}' /dev/null`, shows: [/\| status +\| queued /] },
  { match: /^(IMAGE|TOKEN)=\$\(openstack --os-cloud ferry-aws /, run: true },
  { match: /^curl -sf -X POST .*web-download/s, run: true },
  { match: /^openstack --os-cloud ferry-aws image show big -c status -c size/, run: true, until: /\| status +\| active /, shows: [new RegExp(`\\| size +\\| ${IMAGE_BYTES.length} `)] },
  { match: /^npm run smoke -- --endpoint /, run: true, long: true, shows: [/\| volumes and attachments +\| pass /, /\| share migration both ways +\| pass /, /\| server moves +\| pass /] },

  // --- only against AWS: each checked for well-formedness
  { match: /^export (CDK_DISABLE_CLI_TELEMETRY|AWS_REGION)=/, awsOnly: 'the CDK CLI environment', check: (c) => expect(c).toMatch(/CDK_DISABLE_CLI_TELEMETRY=true/) },
  { match: /^npx cdk (bootstrap|deploy|destroy)\b/, awsOnly: 'deploys to or deletes from an AWS account', check: checkCdkLine },
  { match: /^(cdk deploy -c inventory=FILE|cdk deploy|cdk destroy|cdk synth)$/, awsOnly: 'a mention of the cdk command the doc gives in full', check: checkCdkLine },
  { match: /(^|\$\()aws /, awsOnly: 'an AWS API call with AWS credentials', check: checkAwsLine },
  { match: /^docker build --platform linux\/arm64$/, awsOnly: 'cdk deploy builds the copy worker image with Docker', check: () => expect(readFileSync(join(ROOT, 'infra/aws/copy-worker.ts'), 'utf8')).toContain('Platform.LINUX_ARM64') },

  // --- not run here: builds, tests of their own, mentions of a subcommand the doc shows elsewhere
  { match: /^npm run (synth|test:infra|test:crash)\b/, notRun: 'builds and tests of their own (npm run test:infra runs the synth; npm run test:crash is the crash matrix)', check: checkSubcommand },
  { match: /^npm (ci|test|run smoke:local|run smoke)$/, notRun: 'a mention (npm test is this suite; npm run smoke:local is in .ci/run; npm run smoke is run above)', check: checkSubcommand },
  { match: /^ferry (audit|inventory|watch|token create --admin)/, notRun: 'a mention of the operator CLI (its tests: test/integration/inventory-deployed.test.ts, ferry-cli*.test.ts)', check: checkSubcommand },
  { match: /^cinder (unmanage|failover-host)$/, notRun: 'a mention of a cinder subcommand the doc shows in full elsewhere', check: checkSubcommand },
  { match: /^manila (extend|shrink|migration-get-progress|show)$/, notRun: 'a mention of a manila subcommand', check: checkSubcommand },
  { match: /^openstack (user set --password|user password set|image save|image create)$/, notRun: 'a mention of an openstack command', check: checkSubcommand },
  { match: /^glance (image-download|image-create-via-import)\b/, notRun: 'a mention of glanceclient, which this machine does not drive', check: checkSubcommand },
];

/** The volume `cinder manage` made is Ferry's now: it becomes available on the backend it was found on, under the name the operator gave it. */
async function managedAvailable(volumeId: string, l: Local): Promise<void> {
  const show = async () => ((await (await fetch(`${l.stack.url}/volume/v3/admin/volumes/${volumeId}`, { headers: { 'X-Auth-Token': 'admin:admin' } })).json()) as { volume: Record<string, unknown> }).volume;
  const volume = await eventually(async (note) => {
    const shown = await show();
    return note(shown.status) === 'available' ? shown : undefined;
  }, `managed volume ${volumeId} available`);
  expect(volume).toMatchObject({ 'os-vol-host-attr:host': 'ferry@lvm-a#pool0', size: 1 });
}

const ruleOf = (c: DocCommand) => RULES.find((r) => r.match.test(bare(c.command)) && (!r.comment || r.comment.test(c.command)));
const where = (c: DocCommand) => `docs/aws.md line ${c.lineNo} (${c.section || 'top'}, ${c.from}): ${c.command.split('\n')[0]}`;

let local: Local | undefined;
let shell: ShellSession | undefined;
let imageSource: Server | undefined;

/**
 * The shell's working directory. A user types the doc's lines in the checkout, so its clouds.yaml
 * lines (`cat > clouds.yaml`, `export OS_CLIENT_CONFIG_FILE=$PWD/clouds.yaml`) write there; typed
 * as written in the checkout, two runs of the test in one checkout would share that file (and a
 * user's own clouds.yaml would be overwritten). So the lines run in a directory of their own, and
 * `npm` in that shell is npm with `--prefix` at the checkout: the doc's `npm run …` lines run the
 * checkout's scripts, as they do for the user.
 */
const WORK_DIR = mkdtempSync(join(tmpdir(), 'ferry-aws-docs-'));
const NPM_AT_CHECKOUT = join(WORK_DIR, '.bin');

function npmAtCheckout(): string {
  const npm = execFileSync('bash', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim();
  mkdirSync(NPM_AT_CHECKOUT);
  writeFileSync(join(NPM_AT_CHECKOUT, 'npm'), `#!/bin/sh\nexec '${npm}' --prefix '${ROOT}' "$@"\n`);
  chmodSync(join(NPM_AT_CHECKOUT, 'npm'), 0o755);
  return NPM_AT_CHECKOUT;
}

/** The checkout's clouds.yaml (a user's own, or none), which a run must leave as it was. */
const checkoutCloudsYaml = () => (existsSync(join(ROOT, 'clouds.yaml')) ? readFileSync(join(ROOT, 'clouds.yaml'), 'utf8') : undefined);
const CHECKOUT_CLOUDS_YAML = checkoutCloudsYaml();

beforeAll(async () => {
  imageSource = createServer((_req, res) => res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': String(IMAGE_BYTES.length) }).end(IMAGE_BYTES));
  await new Promise<void>((r) => imageSource!.listen(0, '127.0.0.1', r));
  const port = (imageSource.address() as AddressInfo).port;
  // The image API fetches from 80 and 443 only unless told: the local source's port is allowed (this file's process only).
  process.env.FERRY_IMAGE_IMPORT_ALLOWED_PORTS = `80,443,${port}`;
  const stack = await useLocalStack();
  const clouds = parseYaml(readFileSync(stack.cloudsYaml, 'utf8')) as { clouds: Record<string, { auth: { username: string; password: string } }> };
  const admin = Object.values(clouds.clouds).find((c) => c.auth.username === 'admin')!;
  local = { stack, importUrl: `http://127.0.0.1:${port}/cirros.img`, adminPassword: admin.auth.password };
  const env = clientEnv();
  shell = await startShell({ cwd: WORK_DIR, env: { ...env, PATH: `${npmAtCheckout()}:${env.PATH}`, FERRY_DATA_DIR: stack.dataDir } });
}, 120_000);

afterAll(async () => {
  await shell?.close();
  await local?.stack.stop();
  await new Promise((r) => imageSource?.close(r));
  // The clouds.yaml the doc's lines wrote (the full run's) is in the shell's own directory.
  await rm(WORK_DIR, { recursive: true, force: true });
  await rm(IMAGE_FILE, { force: true });
}, 60_000);

class DocLineFailed extends Error {
  override name = 'DocLineFailed';
}

function asTyped(c: DocCommand, rule: Extract<Rule, { run: true }>, l: Local): string {
  let typed = rule.local ? rule.local(c.command, l) : c.command;
  for (const [doc, here] of localNames(l)) typed = typed.replaceAll(doc, here);
  if (/<[A-Za-z][^<>]*>/.test(typed.replace(/<<<?\s*\S+/g, ''))) throw new DocLineFailed(`${where(c)}: a placeholder with no local value:\n${typed}`);
  return typed;
}

async function runLine(c: DocCommand, rule: Extract<Rule, { run: true }>, l: Local): Promise<{ ms: number; tries: number }> {
  const typed = asTyped(c, rule, l);
  const started = Date.now();
  let lastOutput = '';
  for (let tries = 1; ; tries++) {
    const left = started + (rule.long ? SMOKE_TIMEOUT_MS : LINE_TIMEOUT_MS) - Date.now();
    const result = await shell!.run(typed, left).catch((e: unknown) => {
      throw new DocLineFailed(`${where(c)}\n${(e as Error).message}${lastOutput ? `\n--- the try before ---\n${lastOutput}` : ''}`);
    });
    lastOutput = result.output;
    const tail = result.output.trimEnd().split('\n').slice(-30).join('\n');
    if (result.code !== 0) throw new DocLineFailed(`${where(c)}\nexited ${result.code}; typed:\n${typed}\n--- output ---\n${tail}`);
    if (rule.until && !rule.until.test(result.output)) {
      if (Date.now() - started > LINE_TIMEOUT_MS) throw new DocLineFailed(`${where(c)}\nnever showed ${rule.until}\n--- last output ---\n${tail}`);
      continue;
    }
    for (const shows of rule.shows ?? []) if (!shows.test(result.output)) throw new DocLineFailed(`${where(c)}\nits output does not show ${shows}\n--- output ---\n${tail}`);
    await rule.after?.(result.output, l);
    return { ms: Date.now() - started, tries };
  }
}

/** CPU seconds of the bash and the commands it ran and waited for (utime, stime, cutime, cstime of /proc/<pid>/stat). */
function shellCpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // Fields 14-17 of proc(5), counted from the state (field 3) at index 0; clock ticks of 1/100 s.
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0) / 100;
}

test('every command line of docs/aws.md is run here or listed as AWS-only or a mention, and each listed one is well-formed', () => {
  const commands = docCommands(readFileSync(DOC, 'utf8'));
  const uncovered = commands.filter((c) => !ruleOf(c));
  expect(uncovered.map(where), 'lines no rule runs or lists').toEqual([]);
  const used = new Map<Rule, number>();
  for (const c of commands) used.set(ruleOf(c)!, (used.get(ruleOf(c)!) ?? 0) + 1);
  expect(RULES.filter((r) => !used.has(r)).map((r) => String(r.match)), 'rules that cover no line of the doc').toEqual([]);
  for (const c of commands) {
    const rule = ruleOf(c)!;
    // A line run here with its AWS part replaced (PASSWORD=$(aws …)) is checked as an AWS line too.
    const check = 'check' in rule ? rule.check : /(^|\$\()aws /.test(c.command) ? checkAwsLine : undefined;
    if (!check) continue;
    try {
      check(c.command);
    } catch (e) {
      throw new DocLineFailed(`${where(c)}\nis not well-formed: ${(e as Error).message}`);
    }
  }
  expect(commands.filter((c) => 'run' in ruleOf(c)!).length, 'lines run against the local stack').toBeGreaterThan(40);
});

test(`${FULL ? 'every' : 'the CLI setup block\'s'} command line${FULL ? ' to run' : ''} succeeds against a local stack and shows what the doc says`, async () => {
  const commands = docCommands(readFileSync(DOC, 'utf8')).filter((c) => 'run' in ruleOf(c)!);
  const ordered = [...commands.filter((c) => FIRST.includes(c.section)).sort((a, b) => FIRST.indexOf(a.section) - FIRST.indexOf(b.section) || a.lineNo - b.lineNo), ...commands.filter((c) => !FIRST.includes(c.section))];
  const runs = FULL ? ordered : ordered.filter((c) => QUICK.includes(c.section) || QUICK_LINES.some((r) => r.test(bare(c.command))));
  const timings: string[] = [];
  const started = Date.now();
  for (const c of runs) {
    const { ms, tries } = await runLine(c, ruleOf(c) as Extract<Rule, { run: true }>, local!);
    if (process.env.FERRY_AWS_DOCS_VERBOSE) console.log(`line ${c.lineNo} ${ms} ms ${tries} tries: ${c.command.split('\n')[0]}`);
    timings.push(`line ${c.lineNo} ${(ms / 1000).toFixed(1)} s${tries > 1 ? ` (${tries} tries)` : ''}`);
  }
  const cpu = process.cpuUsage();
  console.log(
    `docs/aws.md: ${runs.length} of ${commands.length} lines run in ${((Date.now() - started) / 1000).toFixed(1)} s${FULL ? '' : ' (the rest in npm run test:aws-docs)'}; ` +
      `CPU: test process ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s, the shell and its commands ${shellCpuSeconds(shell!.pid).toFixed(1)} s; ${timings.join(', ')}`,
  );
  expect(runs.length).toBeGreaterThan(FULL ? 40 : 10);
  // The doc's clouds.yaml lines (the full run's) wrote in the shell's directory, not the checkout.
  expect(existsSync(join(WORK_DIR, 'clouds.yaml'))).toBe(FULL);
  expect(checkoutCloudsYaml(), "the checkout's clouds.yaml").toBe(CHECKOUT_CLOUDS_YAML);
}, FULL ? 1_200_000 : 300_000);

/**
 * `ferry`: the operator's own tool beside the upstream OpenStack clients.
 *
 *   ferry token create --user U --project P [--admin] [--ttl-days N]
 *   ferry audit [--json] [--repair [--grace SECONDS]]
 *   ferry inventory apply FILE [--dry-run] | ferry inventory show
 *   ferry help [COMMAND [SUBCOMMAND]] | ferry COMMAND [SUBCOMMAND] --help
 *
 * Exit codes: 0 done (audit: clean), 1 the command ran and found a problem (audit findings),
 * 2 the command could not run: a wrong command line (usage printed), no stack to talk to, or an
 * error reaching it (said in words, one line with what to do, so a script can tell "findings"
 * from "could not look"; `--debug` or FERRY_DEBUG=1 adds the full error).
 *
 * Run as `ferry ...` (bin/ferry.mjs registers tsx) or `npm run ferry -- ...`.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inspect, parseArgs } from 'node:util';
import { STATE_MACHINE_NAMES, stateMachineEnvName } from '../functions/core/machines.js';
import { CannotRun, cannotRead, requireStack, UsageError, type Io } from './cli.js';
import { dataDir, errorName, explainError, firstLine, quietAwsSdk, useRunningLocalStack, where } from './environment.js';
import { COMMAND_HELP, USAGE, asksForHelp, helpTopic } from './help.js';

export { COMMAND_HELP, USAGE } from './help.js';
export { explainError, quietAwsSdk, useRunningLocalStack } from './environment.js';

export type { Io } from './cli.js';
const processIo: Io = {
  out: (l) => console.log(l),
  err: (l) => console.error(l),
  write: (t) => void process.stdout.write(t),
  isTTY: process.stdout.isTTY === true,
  columns: process.stdout.columns,
};


const DAY_SECONDS = 86_400;

async function tokenCreate(args: string[], io: Io): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: {
      user: { type: 'string' },
      project: { type: 'string' },
      admin: { type: 'boolean', default: false },
      'ttl-days': { type: 'string' },
    },
  });
  if (!values.user?.trim()) throw new UsageError('token create needs --user');
  if (!values.project?.trim()) throw new UsageError('token create needs --project');
  let ttlSeconds: number | undefined;
  if (values['ttl-days'] !== undefined) {
    const days = Number(values['ttl-days']);
    if (!Number.isFinite(days) || days <= 0) throw new UsageError(`--ttl-days must be a positive number of days, not "${values['ttl-days']}"`);
    ttlSeconds = Math.round(days * DAY_SECONDS);
  }
  if (!process.env.FERRY_DYNAMODB_ENDPOINT && !process.env.FERRY_TABLE_TOKENS) {
    throw new UsageError('set FERRY_TABLE_TOKENS to the stack output TableNameTokens (AWS), or FERRY_DYNAMODB_ENDPOINT (local stack)');
  }
  // Imported here so `ferry help` and usage errors do not load the AWS SDK.
  const { createToken } = await import('../functions/auth/tokens.js');
  const { token, record } = await createToken({ userId: values.user.trim(), projectId: values.project.trim(), admin: values.admin ?? false, ttlSeconds });
  io.out(`token:   ${token}`);
  io.out(`user:    ${record.userId}`);
  io.out(`project: ${record.projectId}`);
  io.out(`roles:   ${record.roles}`);
  io.out(`expires: ${record.expiresAt ? new Date(record.expiresAt * 1000).toISOString() : 'never'}`);
  io.err('Keep the token now: Ferry stores only its hash and cannot show it again.');
  return 0;
}

async function audit(args: string[], io: Io): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: { json: { type: 'boolean', default: false }, repair: { type: 'boolean', default: false }, grace: { type: 'string' } },
  });
  if (values.grace !== undefined && !values.repair) throw new UsageError('--grace goes with --repair');
  const graceSeconds = values.grace === undefined ? undefined : Number(values.grace);
  if (graceSeconds !== undefined && !(Number.isFinite(graceSeconds) && graceSeconds >= 0)) throw new UsageError(`--grace must be a number of seconds, not "${values.grace}"`);
  requireStack();
  if (values.repair) {
    requireMachines();
    return auditRepair(graceSeconds, values.json ?? false, io);
  }
  const { runAudit, formatAuditReport } = await import('../functions/audit/audit.js');
  let report;
  try {
    report = await runAudit();
  } catch (e) {
    throw cannotRead(e);
  }
  io.out(values.json ? JSON.stringify(report, null, 2) : formatAuditReport(report));
  return report.findings.length > 0 ? 1 : 0;
}


/** `ferry audit --repair`: one reconciler pass; each repair printed as it is made, then what remains. */
async function auditRepair(graceSeconds: number | undefined, json: boolean, io: Io): Promise<number> {
  const { reconcile, RECONCILE_GRACE_SECONDS } = await import('../functions/audit/reconciler.js');
  const { formatAuditReport } = await import('../functions/audit/audit.js');
  const before = new Date(Date.now() - (graceSeconds ?? RECONCILE_GRACE_SECONDS) * 1000);
  let result;
  try {
    result = await reconcile({ before, log: json ? undefined : (r) => io.out(`${r.outcome}\t${r.kind}\t${r.resource}\n  saw: ${r.saw}\n  did: ${r.did}`) });
  } catch (e) {
    throw cannotRead(e);
  }
  if (json) io.out(JSON.stringify(result, null, 2));
  else {
    io.out(`${result.repaired.length} repaired, ${result.left.length} left alone or failed`);
    io.out(formatAuditReport({ checked: result.checked, findings: result.remaining }));
  }
  return result.remaining.length > 0 ? 1 : 0;
}

async function inventory(args: string[], io: Io): Promise<number> {
  const [sub, ...rest] = args;
  const { values, positionals } = parseArgs({ args: rest, strict: true, allowPositionals: true, options: { 'dry-run': { type: 'boolean', default: false } } });
  if (sub === 'show') {
    if (positionals.length || values['dry-run']) throw new UsageError('inventory show takes no arguments');
    requireStack();
    const { showInventory } = await import('../functions/inventory/apply.js');
    for (const line of await showInventory().catch((e) => Promise.reject(cannotRead(e, 'inventory show')))) io.out(line);
    return 0;
  }
  if (sub !== 'apply') throw new UsageError(sub ? `unknown inventory subcommand "${sub}"` : 'inventory needs a subcommand: apply or show');
  if (positionals.length !== 1) throw new UsageError('inventory apply needs one FILE');
  requireStack();
  const { readInventoryFile, InventoryFileError } = await import('../infra/inventory-file.js');
  const { applyInventory } = await import('../functions/inventory/apply.js');
  const { formatPlan } = await import('../functions/inventory/plan.js');
  let document: unknown;
  try {
    document = readInventoryFile(positionals[0]!);
  } catch (e) {
    if (e instanceof InventoryFileError) throw new CannotRun(e.message);
    throw e;
  }
  // A deployed stack's tables (FERRY_TABLE_*) without a local endpoint: the AWS rules apply.
  const target = process.env.FERRY_TABLE_VOLUME && !process.env.FERRY_DYNAMODB_ENDPOINT ? 'aws' : 'local';
  const dryRun = values['dry-run'] ?? false;
  let result;
  try {
    // Against a deployed stack this machine has no share storage to make roots on.
    result = await applyInventory(document, { target, dryRun, makesShareRoots: target === 'local', ...(target === 'local' ? { dataDir: resolve(dataDir()) } : {}) });
  } catch (e) {
    if ((e as Error).name === 'BadRequest') throw new CannotRun((e as Error).message);
    throw e;
  }
  for (const line of formatPlan(result.plan)) io.out(line);
  if (result.plan.refusals.length > 0) {
    io.err('nothing was applied: resolve the refusals above (or keep those entries in the file)');
    return 1;
  }
  io.out(dryRun ? 'dry run: nothing written' : result.plan.changes.length ? 'applied' : 'nothing to change');
  return 0;
}


/**
 * --repair asks Step Functions whether a server operation's execution exists before it abandons
 * the operation: against a deployed stack it needs the machines' ARNs (the functions get them from
 * CDK), never a guessed one that could answer "no such execution" for a live operation.
 */
function requireMachines(): void {
  if (!process.env.FERRY_TABLE_VOLUME || process.env.FERRY_DYNAMODB_ENDPOINT) return;
  // The server machines (operations without execution), snapshot-create (a creating snapshot's waiting machine) and image-import (an importing image's).
  const missing = STATE_MACHINE_NAMES.filter((m) => m.startsWith('server-') || m === 'snapshot-create' || m === 'image-import').map(stateMachineEnvName).filter((name) => !process.env[name]);
  if (missing.length > 0) {
    throw new CannotRun(`--repair against a deployed stack needs the server, snapshot-create and image-import machines' ARNs: set ${missing.join(', ')} (or let the stack's reconciler function run it)`);
  }
}


/** `--debug` (anywhere before a `--`) taken out of the command line; FERRY_DEBUG=1 means the same. */
function takeDebugFlag(argv: string[]): { args: string[]; debug: boolean } {
  const end = argv.indexOf('--');
  const head = end < 0 ? argv : argv.slice(0, end);
  const args = [...head.filter((a) => a !== '--debug'), ...(end < 0 ? [] : argv.slice(end))];
  const fromEnv = ['1', 'true', 'yes'].includes((process.env.FERRY_DEBUG ?? '').toLowerCase());
  return { args, debug: fromEnv || args.length !== argv.length };
}

/** `ferry help [COMMAND [SUBCOMMAND]]`. */
function help(words: readonly string[], io: Io): number {
  if (words.length === 0) {
    io.out(USAGE);
    return 0;
  }
  const topic = words.join(' ');
  if (!Object.hasOwn(COMMAND_HELP, topic)) throw new UsageError(`no help for "${topic}"`);
  io.out(COMMAND_HELP[topic]!);
  return 0;
}

/** Runs one command line (without `node ferry`); resolves to the process exit code. */
export async function main(argv: string[], io: Io = processIo): Promise<number> {
  const { args, debug } = takeDebugFlag(argv);
  const [command, ...rest] = args;
  try {
    // Help reads nothing, not even which stack runs.
    if (command === 'help' || command === '--help' || command === '-h') return help(rest, io);
    const topic = helpTopic(command, rest);
    if (topic !== undefined && asksForHelp(rest)) {
      io.out(COMMAND_HELP[topic]!);
      return 0;
    }
    useRunningLocalStack();
    switch (command) {
      case 'token': {
        const [sub, ...args] = rest;
        if (sub !== 'create') throw new UsageError(sub ? `unknown token subcommand "${sub}"` : 'token needs a subcommand: create');
        return await tokenCreate(args, io);
      }
      case 'audit':
        return await audit(rest, io);
      case 'inventory':
        return await inventory(rest, io);
      case 'ops':
        return await (await import('./ops.js')).ops(rest, io);
      case 'watch':
        return await (await import('./watch.js')).watch(rest, io);
      case undefined:
        throw new UsageError('no command given');
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } catch (e) {
    // parseArgs reports unknown or malformed options with these codes: a usage mistake too.
    const code = (e as { code?: string }).code;
    if (e instanceof UsageError || (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS'))) {
      io.err(`ferry: ${(e as Error).message}`);
      // The command's own usage when it has one, else the whole list.
      const topic = command === 'help' ? undefined : helpTopic(command, rest);
      io.err(topic !== undefined ? COMMAND_HELP[topic]! : USAGE);
      return 2;
    }
    if (e instanceof CannotRun) {
      io.err(`ferry: ${e.message}`);
      if (debug && e.cause !== undefined) io.err(inspect(e.cause, { depth: 6 }));
      return 2;
    }
    // Anything else that reached the top (an SDK or network error no command explained): one line
    // that says what is wrong and what to do, the full error only when asked for.
    const explained = explainError(e);
    io.err(explained !== undefined ? `ferry: cannot use ${where()}: ${explained}` : `ferry: ${errorName(e)}: ${firstLine(e)}${debug ? '' : ' (--debug shows the full error)'}`);
    if (debug) io.err(inspect(e, { depth: 6 }));
    return 2;
  }
}

// Run when executed directly (`node --import tsx bin/ferry.ts`, i.e. `npm run ferry`);
// bin/ferry.mjs imports this module and calls main itself.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  quietAwsSdk();
  // `ferry inventory show | head`: the reader went away (bin/ferry.mjs does the same).
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
    throw e;
  });
  process.exitCode = await main(process.argv.slice(2));
}

/**
 * `ferry`: the operator's own tool beside the upstream OpenStack clients.
 *
 *   ferry token create --user U --project P [--admin] [--ttl-days N]
 *   ferry audit [--json] [--repair [--grace SECONDS]]
 *   ferry inventory apply FILE [--dry-run] | ferry inventory show
 *   ferry help
 *
 * Exit codes: 0 done (audit: clean), 1 the command ran and found a problem (audit findings),
 * 2 the command could not run: a wrong command line (usage printed), no stack to talk to, or an
 * error reaching it (said in words, so a script can tell "findings" from "could not look").
 *
 * Run as `ferry ...` (bin/ferry.mjs registers tsx) or `npm run ferry -- ...`.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runningStack, type StackFile } from '../infra/local/data-dir-lock.js';
import { STATE_MACHINE_NAMES, stateMachineEnvName } from '../functions/core/machines.js';
import { STEP_FUNCTIONS_PATH } from '../infra/local/http.js';

export const USAGE = `usage:
  ferry token create --user USER --project PROJECT [--admin] [--ttl-days N]
      Mint an API token for the AWS deployment and print it (once: only its hash is stored).
      Uses DynamoDB Local when FERRY_DYNAMODB_ENDPOINT is set, else AWS with the table named by
      FERRY_TABLE_TOKENS (the stack output TableNameTokens).
  ferry audit [--json] [--repair [--grace SECONDS]]
      Compare DynamoDB with what the drivers hold: exit 0 clean, 1 findings, 2 could not run.
      --repair first finishes or undoes what crashed operations left, then repairs what is
      provably safe (an export no attachment uses, an attachment no BDM or operation holds,
      unchanged for --grace seconds, default 600), prints each repair (what it saw, what it did),
      then the findings that remain for an operator: exit 0 when none remain, 1 when some do.
      Talks to the local stack of FERRY_DATA_DIR (default .ferry) unless FERRY_DYNAMODB_ENDPOINT
      or FERRY_TABLE_VOLUME (a deployed stack) is set.
  ferry inventory apply FILE [--dry-run]
      Make the stack hold what the inventory FILE (YAML or JSON) names: volume and share backends
      and types, projects, cells and hosts, flavors, networks, images. Prints each change (+ add,
      ~ change, - remove); removes only what an earlier inventory added and FILE no longer names,
      never what is in use (refused: nothing is written, exit 1). A second apply changes nothing.
      --dry-run prints the plan and writes nothing. Relative roots are under FERRY_DATA_DIR.
  ferry inventory show
      Everything the stack holds, by kind, marked [inventory] or [api] and when in use.
  ferry watch OPERATION
      (not yet available) follow an operation's progress.
  ferry help
      Show this text.`;

/** Where output goes; tests pass their own. */
export interface Io {
  out(line: string): void;
  err(line: string): void;
}
const processIo: Io = { out: (l) => console.log(l), err: (l) => console.error(l) };

/** A mistake on the command line: printed with the usage, exit code 2. */
class UsageError extends Error {
  override name = 'UsageError';
}

/** The command cannot reach what it needs (no stack running, credentials missing): exit code 2. */
class CannotRun extends Error {
  override name = 'CannotRun';
}

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

const cannotRead = (e: unknown) => new CannotRun(`the audit could not read the stack (${where()}): ${(e as Error).name}: ${(e as Error).message}`);

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
    for (const line of await showInventory().catch((e) => Promise.reject(cannotRead(e)))) io.out(line);
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
 * With no endpoint configured, use the local stack running on this machine (`npm start` writes its
 * endpoints to <data dir>/stack.json), so `ferry audit` works in a second terminal as it is.
 */
export function useRunningLocalStack(): void {
  if (process.env.FERRY_DYNAMODB_ENDPOINT || process.env.FERRY_TABLE_VOLUME) return;
  // Only the stack that holds the data directory now: a stack.json left by one killed -9 names a dead endpoint.
  const stack = runningStack(dataDir()) as ({ sfnEndpoint?: string } & StackFile) | undefined;
  if (!stack) return;
  if (stack.dynamodbEndpoint) process.env.FERRY_DYNAMODB_ENDPOINT = stack.dynamodbEndpoint;
  if (stack.s3Endpoint) process.env.FERRY_S3_ENDPOINT = stack.s3Endpoint;
  // --repair asks Step Functions whether an operation's execution exists: the stack serves it under its URL.
  const sfnEndpoint = stack.sfnEndpoint ?? (stack.url ? `${stack.url}${STEP_FUNCTIONS_PATH}` : undefined);
  if (sfnEndpoint && !process.env.FERRY_SFN_ENDPOINT) process.env.FERRY_SFN_ENDPOINT = sfnEndpoint;
}

function dataDir(): string {
  return process.env.FERRY_DATA_DIR ?? '.ferry';
}

/** Where the command talks to, in words. */
function where(): string {
  if (process.env.FERRY_DYNAMODB_ENDPOINT) return `DynamoDB at ${process.env.FERRY_DYNAMODB_ENDPOINT}`;
  if (process.env.FERRY_TABLE_VOLUME) return `the deployed stack's table ${process.env.FERRY_TABLE_VOLUME}`;
  return `FERRY_DATA_DIR=${process.env.FERRY_DATA_DIR ?? '.ferry'}`;
}

/** A command that reads the stack needs one: a running local stack or a configured deployment. */
function requireStack(): void {
  if (process.env.FERRY_DYNAMODB_ENDPOINT || process.env.FERRY_TABLE_VOLUME) return;
  throw new CannotRun(
    `no local stack is running for FERRY_DATA_DIR=${dataDir()} (no stack holds it): start one with \`npm start\`, ` +
      'set FERRY_DATA_DIR to its data directory, or set FERRY_TABLE_VOLUME (and AWS credentials) for a deployed stack',
  );
}

/**
 * --repair asks Step Functions whether a server operation's execution exists before it abandons
 * the operation: against a deployed stack it needs the machines' ARNs (the functions get them from
 * CDK), never a guessed one that could answer "no such execution" for a live operation.
 */
function requireMachines(): void {
  if (!process.env.FERRY_TABLE_VOLUME || process.env.FERRY_DYNAMODB_ENDPOINT) return;
  const missing = STATE_MACHINE_NAMES.filter((m) => m.startsWith('server-')).map(stateMachineEnvName).filter((name) => !process.env[name]);
  if (missing.length > 0) {
    throw new CannotRun(`--repair against a deployed stack needs the server machines' ARNs: set ${missing.join(', ')} (or let the stack's reconciler function run it)`);
  }
}

/** Runs one command line (without `node ferry`); resolves to the process exit code. */
export async function main(argv: string[], io: Io = processIo): Promise<number> {
  const [command, ...rest] = argv;
  try {
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
      case 'watch':
        // TODO(ferry watch issue): a progress bar with rate and ETA from the operation record.
        throw new UsageError('ferry watch is not available yet');
      case 'help':
      case '--help':
      case '-h':
        io.out(USAGE);
        return 0;
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
      io.err(USAGE);
      return 2;
    }
    if (e instanceof CannotRun) {
      io.err(`ferry: ${e.message}`);
      return 2;
    }
    io.err(`ferry: ${(e as Error).name}: ${(e as Error).message}`);
    return 2;
  }
}

// Run when executed directly (`node --import tsx bin/ferry.ts`, i.e. `npm run ferry`);
// bin/ferry.mjs imports this module and calls main itself.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}

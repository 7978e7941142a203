/**
 * `ferry`: the operator's own tool beside the upstream OpenStack clients.
 *
 *   ferry token create --user U --project P [--admin] [--ttl-days N]
 *   ferry audit [--json]
 *   ferry help
 *
 * Exit codes: 0 done, 1 the command ran and found a problem (audit findings, an AWS error),
 * 2 the command line was wrong (usage printed).
 *
 * Run as `ferry ...` (bin/ferry.mjs registers tsx) or `npm run ferry -- ...`.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

export const USAGE = `usage:
  ferry token create --user USER --project PROJECT [--admin] [--ttl-days N]
      Mint an API token for the AWS deployment and print it (once: only its hash is stored).
      Uses DynamoDB Local when FERRY_DYNAMODB_ENDPOINT is set, else AWS with the table named by
      FERRY_TABLE_TOKENS (the stack output TableNameTokens).
  ferry audit [--json]
      Compare DynamoDB with what the drivers hold; exit 1 when there are findings.
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
  const { values } = parseArgs({ args, strict: true, allowPositionals: false, options: { json: { type: 'boolean', default: false } } });
  const { runAudit, formatAuditReport } = await import('../functions/audit/audit.js');
  const report = await runAudit();
  io.out(values.json ? JSON.stringify(report, null, 2) : formatAuditReport(report));
  return report.findings.length > 0 ? 1 : 0;
}

/**
 * With no endpoint configured, use the local stack running on this machine (`npm start` writes its
 * endpoints to <data dir>/stack.json), so `ferry audit` works in a second terminal as it is.
 */
export function useRunningLocalStack(): void {
  if (process.env.FERRY_DYNAMODB_ENDPOINT || process.env.FERRY_TABLE_VOLUME) return;
  const file = join(process.env.FERRY_DATA_DIR ?? '.ferry', 'stack.json');
  if (!existsSync(file)) return;
  const stack = JSON.parse(readFileSync(file, 'utf8')) as { dynamodbEndpoint?: string; s3Endpoint?: string };
  if (stack.dynamodbEndpoint) process.env.FERRY_DYNAMODB_ENDPOINT = stack.dynamodbEndpoint;
  if (stack.s3Endpoint) process.env.FERRY_S3_ENDPOINT = stack.s3Endpoint;
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
    io.err(`ferry: ${(e as Error).name}: ${(e as Error).message}`);
    return 1;
  }
}

// Run when executed directly (`node --import tsx bin/ferry.ts`, i.e. `npm run ferry`);
// bin/ferry.mjs imports this module and calls main itself.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}

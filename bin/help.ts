/**
 * What `ferry help`, `ferry COMMAND --help` and a wrong command line print: the usage of every
 * command, with the stack it talks to, its exit codes and examples (bin/ferry.ts runs the commands).
 */
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
  ferry ops [--since DURATION] [--all] [--json]
      Every operation in flight (share migrations and their copies, failovers, failbacks, drills,
      server moves) with progress, rate, ETA and step; then what failed since --since (default
      24h) with the reason. Exit 0 none failed, 1 some did, 2 could not run.
  ferry watch [OPERATION] [--interval SECONDS] [--plain]
      Follow one operation live until it ends (the only one running when none is named): a
      progress bar with rate, ETA and step. Exit 0 succeeded, 1 failed (the reason printed).
  ferry help [COMMAND [SUBCOMMAND]]
      Show this text, or one command's usage: its options, exit codes and examples (the same as
      \`ferry COMMAND [SUBCOMMAND] --help\`).
  --debug (any command; or FERRY_DEBUG=1)
      When the command cannot run, print the full error after the one-line reason.`;

/** What every command that reads a stack says about where it looks. */
const TALKS_TO = `stack:
  The local stack of FERRY_DATA_DIR (default .ferry) when \`npm start\` runs there; else
  DynamoDB at FERRY_DYNAMODB_ENDPOINT; else the deployed stack whose tables FERRY_TABLE_VOLUME
  (and the other FERRY_TABLE_*, the stack's outputs) name, with AWS credentials and AWS_REGION.`;

const COULD_NOT_RUN = `  2  could not run: a wrong command line (the usage is printed), no stack to talk to, or an
     error reaching it, said in one line with what to do (--debug or FERRY_DEBUG=1: the full error)`;

const TOKEN_CREATE_HELP = `usage: ferry token create --user USER --project PROJECT [--admin] [--ttl-days N]

Mint an API token for the AWS deployment and print it, once: Ferry stores only its hash.

options:
  --user USER        the user the token acts as (required)
  --project PROJECT  the project it is scoped to (required)
  --admin            give it the admin role (default: member and reader)
  --ttl-days N       expire it after N days (default: never)
  --debug            on an error, print the full error too

tables:
  The table named by FERRY_TABLE_TOKENS (the stack output TableNameTokens) with AWS credentials,
  or DynamoDB Local when FERRY_DYNAMODB_ENDPOINT is set (or a local stack runs on FERRY_DATA_DIR).

exit codes:
  0  the token was made (printed on stdout; the reminder to keep it on stderr)
${COULD_NOT_RUN}

example:
  FERRY_TABLE_TOKENS=Ferry-TableTokens-ABC123 ferry token create --user alice --project demo --ttl-days 30`;

const AUDIT_HELP = `usage: ferry audit [--json] [--repair [--grace SECONDS]]

Compare DynamoDB with what the drivers really hold, and list every orphan or mismatch. Without
--repair it only reads.

options:
  --json             print the report (or the repair result) as JSON
  --repair           first finish or undo what crashed operations left, then repair what is
                     provably safe (an export no attachment uses, an attachment no BDM or
                     operation holds, ...), printing each repair (what it saw, what it did), then
                     the findings that remain for an operator
  --grace SECONDS    with --repair: only touch what has not changed for SECONDS (default 600)
  --debug            on an error, print the full error too

${TALKS_TO}

exit codes:
  0  clean (with --repair: no finding remains)
  1  findings (with --repair: some remain for an operator)
${COULD_NOT_RUN}

examples:
  ferry audit
  ferry audit --repair --grace 60
  ferry audit --repair --json`;

const INVENTORY_APPLY_HELP = `usage: ferry inventory apply FILE [--dry-run]

Make the stack hold what the inventory FILE (YAML or JSON) names: volume and share backends and
types, projects, cells and hosts, flavors, networks, images. Prints each change (+ add, ~ change,
- remove, ! refused). Removes only what an earlier inventory added and FILE no longer names, and
never what is in use: a refusal writes nothing. A second apply changes nothing. Relative roots
are under FERRY_DATA_DIR.

options:
  --dry-run          print the plan, write nothing
  --debug            on an error, print the full error too

${TALKS_TO}

exit codes:
  0  applied, or nothing to change (with --dry-run: the plan has no refusal)
  1  refused: something FILE would remove is in use; nothing was written
${COULD_NOT_RUN} (also: FILE unreadable or invalid)

examples:
  ferry inventory apply inventories/sandbox.yaml --dry-run
  ferry inventory apply inventories/sandbox.yaml`;

const INVENTORY_SHOW_HELP = `usage: ferry inventory show

Print everything the stack holds, by kind (backends, types, projects, cells and hosts, flavors,
networks, images), each marked [inventory] (an inventory added it) or [api] (made through the
API), and whether it is in use.

options:
  --debug            on an error, print the full error too

${TALKS_TO}

exit codes:
  0  printed
${COULD_NOT_RUN}

example:
  ferry inventory show`;

const INVENTORY_HELP = `usage: ferry inventory apply FILE [--dry-run]
       ferry inventory show

Manage what the stack holds from one declarative file (ferry help inventory apply, ferry help
inventory show for each).

  apply FILE [--dry-run]   make the stack hold what FILE names (--dry-run: the plan only)
  show                     everything the stack holds, [inventory] or [api], in use or not

${TALKS_TO}

exit codes:
  0  done
  1  apply refused (something in use would be removed); nothing was written
${COULD_NOT_RUN}

examples:
  ferry inventory apply inventories/sandbox.yaml --dry-run
  ferry inventory show`;

const OPS_HELP = `usage: ferry ops [--since DURATION] [--all] [--json]

List every operation in flight, each with a progress bar, how much of how much, the rate, the ETA
and the step it is at; then the operations that failed or were cancelled since the cut-off, each
with the reason in words. Operations: share migrations (with the host-assisted copy's bytes and
files, or the driver's progress), failovers, failbacks and drills of a volume backend (volumes done
of how many), and server operations (live migration with bytes copied, resize, migrate, evacuate,
shelve, ...). The first column is the reference \`ferry watch\` takes.

options:
  --since DURATION   how far back to list failures (and server operations): 30m, 24h, 7d
                     (default 24h)
  --all              list what succeeded since then too
  --json             print {inFlight, recentFailures, ...} as JSON
  --debug            on an error, print the full error too

${TALKS_TO}

exit codes:
  0  listed; nothing failed since the cut-off
  1  listed; something failed or was cancelled since the cut-off
${COULD_NOT_RUN}

examples:
  ferry ops
  ferry ops --since 7d --all`;

const WATCH_HELP = `usage: ferry watch [OPERATION] [--interval SECONDS] [--plain]

Follow one operation live until it ends: on a terminal one line redrawn in place (progress bar,
percent, how much of how much, rate, ETA, step), otherwise a plain line each time the percent or
the step moves. Without OPERATION, the one operation running (if several run, they are named).

OPERATION (as \`ferry ops\` prints it):
  share:SHARE_ID                 the share's migration (running, else the last)
  replication:OPERATION_ID       a failover, failback, drill or drill end
  backend:HOST@BACKEND           that backend's running (else last) failover or drill
  server:UUID[@REQUEST_ID]       the server's running (else last) operation
  copy:OPERATION_ID              a copy worker's operation
  ID                             any of these by its id

options:
  --interval SECONDS   how often to read the operation (default 1)
  --plain              plain lines even on a terminal
  --debug              on an error, print the full error too

${TALKS_TO}

exit codes:
  0  it succeeded, or a phase ended and it waits for the operator (migration-complete,
     resize-confirm)
  1  it failed or was cancelled: the reason is printed
${COULD_NOT_RUN}
     (also when no operation has that reference)

examples:
  ferry watch share:6f0c2b1e-...
  ferry watch backend:ferry@lvm-r`;

/**
 * Each command's own usage (`ferry help COMMAND`, `ferry COMMAND --help`), keyed by its words.
 * A command not listed here handles its own `--help`.
 */
export const COMMAND_HELP: Readonly<Record<string, string>> = {
  token: TOKEN_CREATE_HELP,
  'token create': TOKEN_CREATE_HELP,
  audit: AUDIT_HELP,
  inventory: INVENTORY_HELP,
  'inventory apply': INVENTORY_APPLY_HELP,
  'inventory show': INVENTORY_SHOW_HELP,
  ops: OPS_HELP,
  watch: WATCH_HELP,
};

/** Where output goes; tests pass their own. */

/** The COMMAND_HELP entry for `command` and its first argument (a subcommand), the longest that exists. */
export function helpTopic(command: string | undefined, rest: readonly string[]): string | undefined {
  if (command === undefined || !Object.hasOwn(COMMAND_HELP, command)) return undefined;
  const sub = rest[0] !== undefined ? `${command} ${rest[0]}` : undefined;
  return sub !== undefined && Object.hasOwn(COMMAND_HELP, sub) ? sub : command;
}

/** True when `--help` or `-h` is among the arguments (before a `--`). */
export function asksForHelp(rest: readonly string[]): boolean {
  const end = rest.indexOf('--');
  return (end < 0 ? rest : rest.slice(0, end)).some((a) => a === '--help' || a === '-h');
}

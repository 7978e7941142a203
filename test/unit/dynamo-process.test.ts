/**
 * What keeps DynamoDB Local from outliving its stack (infra/local/dynamo-process.ts): the command
 * runs under setpriv's parent-death signal, so a kill -9 of the process that started it, which runs
 * none of its code, still ends it. A stand-in child (`sleep`, no JVM in the unit tier) under a plain
 * node parent shows the kernel does it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, test } from 'vitest';
import { processAlive } from '../../infra/local/data-dir-lock.js';
import { FAST_START_JVM_OPTIONS, parentDeathSignalCommand, withParentDeathSignal } from '../../infra/local/dynamo-process.js';
import { eventually } from '../support/poll.js';

const started: ChildProcess[] = [];
const orphans: number[] = [];

afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const pid of orphans.splice(0)) if (processAlive(pid)) process.kill(pid, 'SIGKILL');
});

/** A node process that starts `[command, args]` and prints the child's pid. */
async function parentOf(command: string, args: string[]): Promise<{ parent: ChildProcess; child: number }> {
  const code = `const c = require('node:child_process').spawn(${JSON.stringify(command)}, ${JSON.stringify(args)}, { stdio: 'ignore' }); c.on('spawn', () => console.log(c.pid)); setInterval(() => {}, 1000);`;
  const parent = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  started.push(parent);
  const child = await new Promise<number>((resolve) => parent.stdout!.once('data', (d) => resolve(Number(String(d).trim()))));
  orphans.push(child);
  return { parent, child };
}

describe('DynamoDB Local dies with its parent', () => {
  test.runIf(parentDeathSignalCommand() !== undefined)('a kill -9 of the parent ends a child started under the parent-death signal; a plain child outlives it', async () => {
    // Prepare: one child under the signal, one without, each under its own parent.
    const guarded = await parentOf(...withParentDeathSignal('sleep', ['600']));
    const plain = await parentOf('sleep', ['600']);

    // Act: the parents die as a kill -9 kills them.
    guarded.parent.kill('SIGKILL');
    plain.parent.kill('SIGKILL');

    // Assess: the kernel ended the guarded child (setpriv exec'd it: same pid); the plain one runs on.
    await eventually(() => !processAlive(guarded.child), 'the guarded child gone', { timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 300));
    expect(processAlive(plain.child)).toBe(true);
  });

  test('the command and its arguments pass through unchanged, after setpriv where there is one', () => {
    const [command, args] = withParentDeathSignal('java', ['-jar', 'DynamoDBLocal.jar']);
    if (parentDeathSignalCommand()) {
      expect(command).toMatch(/\/setpriv$/);
      expect(args).toEqual(['--pdeathsig', 'TERM', '--', 'java', '-jar', 'DynamoDBLocal.jar']);
    } else {
      expect([command, args]).toEqual(['java', ['-jar', 'DynamoDBLocal.jar']]);
    }
    // The fast-start options never include what would change where the data lives.
    expect(FAST_START_JVM_OPTIONS.join(' ')).not.toMatch(/inMemory|sharedDb|dbPath/);
  });
});

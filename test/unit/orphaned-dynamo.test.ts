/**
 * A DynamoDB Local left on the data directory by a stack killed alone is found by its command line
 * and stopped before the next one starts (infra/local/orphaned-dynamo.ts). Stand-ins: node
 * processes whose arguments read like DynamoDB Local's (no JVM in the unit tier).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { processAlive } from '../../infra/local/data-dir-lock.js';
import { dynamoProcessesOn, stopOrphanedDynamo } from '../../infra/local/orphaned-dynamo.js';
import { eventually } from '../support/poll.js';

const started: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A process with DynamoDB Local's arguments on `dbPath`; `ignoreTerm`: it survives SIGTERM. */
async function fakeDynamo(dbPath: string, ignoreTerm = false): Promise<ChildProcess> {
  const code = `${ignoreTerm ? "process.on('SIGTERM', () => {});" : ''} setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['-e', code, '--', '-jar', 'DynamoDBLocal.jar', '-dbPath', dbPath, '-port', '1', '-sharedDb'], { stdio: 'ignore' });
  started.push(child);
  await eventually(async () => (dynamoProcessesOn(dbPath).includes(child.pid!) ? true : undefined), 'the stand-in to be listed');
  return child;
}

function dbPath(): string {
  const d = mkdtempSync(join(tmpdir(), 'ferry-orphan-'));
  dirs.push(d);
  return join(d, 'dynamodb');
}

describe('a DynamoDB Local orphaned on the data directory', () => {
  test('is found by its exact -dbPath, not another directory\'s', async () => {
    const mine = dbPath();
    const other = await fakeDynamo(dbPath());

    expect(dynamoProcessesOn(mine)).toEqual([]);
    const orphan = await fakeDynamo(mine);

    expect(dynamoProcessesOn(mine)).toEqual([orphan.pid]);
    expect(dynamoProcessesOn(mine)).not.toContain(other.pid);
  });

  test('is stopped before a new one starts: SIGTERM, then SIGKILL after the grace', async () => {
    const path = dbPath();
    const polite = await fakeDynamo(path);
    const stubborn = await fakeDynamo(path, true);
    const bystander = await fakeDynamo(dbPath());

    const stopped = await stopOrphanedDynamo(path, 300);

    expect(stopped.sort()).toEqual([polite.pid, stubborn.pid].sort());
    expect(processAlive(polite.pid!)).toBe(false);
    expect(processAlive(stubborn.pid!)).toBe(false);
    expect(processAlive(bystander.pid!)).toBe(true);
    expect(dynamoProcessesOn(path)).toEqual([]);
  });
});

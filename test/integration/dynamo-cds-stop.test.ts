/**
 * A DynamoDB Local launched with no class archive yet has one written beside it
 * (infra/local/dynamo-cds-writer.ts), and its stop returns only once that writer is done: its
 * claim gone, no partial left, and either the archive in place or `last-try` saying why not. A
 * stop that returned first left the writer to a start that follows at once, whose CPU it then
 * lacked (scripts/start-time.sh's restarts: cut short every time), and that start found the claim
 * still held ("another process is writing the class archive").
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { launchDynamo } from '../../infra/local/dynamo-process.js';
import { waitForDynamo } from '../../infra/local/dynamo.js';

const cache = mkdtempSync(join(tmpdir(), 'ferry-cds-stop-'));
afterAll(() => rmSync(cache, { recursive: true, force: true }));

test('the stop of a DynamoDB Local whose class archive is being written returns once the writer is done', async () => {
  // Prepare: a JVM with a writer beside it, answering.
  const dynamo = await launchDynamo({ classArchiveDir: cache });
  expect(dynamo.classArchive.state).toBe('writing');
  (await waitForDynamo(dynamo)).destroy();

  // Act
  await dynamo.stop();

  // Assess: the writer has settled everything.
  const [key] = readdirSync(cache);
  const dir = join(cache, key!);
  expect(existsSync(join(dir, 'writing')), 'the claim is gone').toBe(false);
  expect(readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  expect(existsSync(join(dir, 'classes.jsa')) || existsSync(join(dir, 'last-try')), 'an archive, or why not').toBe(true);
}, 60_000);

/**
 * The local stack's identity seeding across restarts (infra/local/clouds.ts seedUsers, issue 16),
 * against DynamoDB Local: the slow scrypt work (a hash made, a password checked against a stored
 * hash) is counted at the one module that does it (functions/identity/passwords.ts).
 *
 * A first start makes one hash per user and checks none (it made them); a restart with clouds.yaml
 * and the table unchanged makes and checks none (identity-hashes.json vouches for both); a password
 * changed in clouds.yaml, a stored hash changed in the table, a hash file missing, unreadable or
 * tampered with are each checked the slow way, and after each the users answer to clouds.yaml's
 * passwords.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, test, vi } from 'vitest';
import { parse, stringify } from 'yaml';
import { DEFAULT_DOMAIN } from '../../functions/identity/model.js';
import * as store from '../../functions/identity/store.js';
import { CLOUDS_FILE, seedIdentity } from '../../infra/local/clouds.js';
import type { LocalDynamo } from '../../infra/local/dynamo.js';
import { useLocalDynamo } from '../support/dynamo.js';

const scrypt = vi.hoisted(() => ({ hashes: 0, checks: 0 }));
vi.mock('../../functions/identity/passwords.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../functions/identity/passwords.js')>();
  return {
    ...real,
    hashSecret: (secret: string) => {
      scrypt.hashes++;
      return real.hashSecret(secret);
    },
    verifySecret: (secret: string, stored: string | undefined) => {
      scrypt.checks++;
      return real.verifySecret(secret, stored);
    },
  };
});
const { verifySecret } = await vi.importActual<typeof import('../../functions/identity/passwords.js')>('../../functions/identity/passwords.js');

const HASHES_FILE = 'identity-hashes.json';
const URL = 'http://127.0.0.1:8780';

let ddb: LocalDynamo;
let dataDir: string;
beforeAll(async () => {
  ddb = await useLocalDynamo();
  dataDir = mkdtempSync(join(tmpdir(), 'ferry-identity-seed-'));
});
afterAll(async () => {
  await ddb?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});
beforeEach(() => {
  scrypt.hashes = 0;
  scrypt.checks = 0;
});

type Clouds = { clouds: Record<string, { auth: { username: string; password: string } }> };
const clouds = () => parse(readFileSync(join(dataDir, CLOUDS_FILE), 'utf8')) as Clouds;

/** Each seeded user's stored hash is of the password clouds.yaml gives for it (checked outside the counts). */
async function usersAnswerToCloudsYaml(): Promise<void> {
  for (const { auth } of Object.values(clouds().clouds)) {
    const userId = await store.userIdByName(DEFAULT_DOMAIN.id, auth.username);
    const user = await store.mustUser(userId!);
    expect(await verifySecret(auth.password, user.passwordHash), auth.username).toBe(true);
  }
}

/** A restart's seeding: what the start does before it answers. */
const restart = async () => {
  await seedIdentity(dataDir, URL);
  return { hashes: scrypt.hashes, checks: scrypt.checks };
};

describe('identity seeding on restart', () => {
  test('a first start hashes each user once and checks nothing it just hashed', async () => {
    expect(await restart()).toEqual({ hashes: 2, checks: 0 });
    await usersAnswerToCloudsYaml();
  });

  test('a restart with clouds.yaml and the table unchanged computes no scrypt hash', async () => {
    const before = readFileSync(join(dataDir, CLOUDS_FILE), 'utf8');
    expect(await restart()).toEqual({ hashes: 0, checks: 0 });
    // The passwords stay.
    expect(readFileSync(join(dataDir, CLOUDS_FILE), 'utf8')).toBe(before);
  });

  test("a password changed in clouds.yaml is checked, found different and hashed anew; the other user's is not", async () => {
    const doc = clouds();
    doc.clouds['ferry-demo']!.auth.password = 'a-password-the-operator-chose';
    writeFileSync(join(dataDir, CLOUDS_FILE), stringify(doc));
    expect(await restart()).toEqual({ hashes: 1, checks: 1 });
    expect(clouds().clouds['ferry-demo']!.auth.password).toBe('a-password-the-operator-chose');
    await usersAnswerToCloudsYaml();
    // And known again at the next restart.
    scrypt.hashes = scrypt.checks = 0;
    expect(await restart()).toEqual({ hashes: 0, checks: 0 });
  });

  test('a stored hash changed in the table since the last start is checked', async () => {
    const adminId = (await store.userIdByName(DEFAULT_DOMAIN.id, 'admin'))!;
    const { hashSecret } = await vi.importActual<typeof import('../../functions/identity/passwords.js')>('../../functions/identity/passwords.js');
    await store.updateUser(adminId, { passwordHash: await hashSecret('changed-through-the-api') });
    expect(await restart()).toEqual({ hashes: 1, checks: 1 });
    await usersAnswerToCloudsYaml();
  });

  test.each([
    ['missing', () => rmSync(join(dataDir, HASHES_FILE))],
    ['not JSON', () => writeFileSync(join(dataDir, HASHES_FILE), '{"ferry-admin": {"hash": ')],
    [
      'with a hash that its digest does not bind to the password',
      () => {
        const known = JSON.parse(readFileSync(join(dataDir, HASHES_FILE), 'utf8')) as Record<string, { hash: string; digest: string }>;
        for (const entry of Object.values(known)) entry.digest = entry.digest.replace(/^./, (c) => (c === '0' ? '1' : '0'));
        writeFileSync(join(dataDir, HASHES_FILE), JSON.stringify(known));
      },
    ],
  ])('a hash file %s: both passwords are checked (and still match), the file written anew', async (_what, damage) => {
    damage();
    expect(await restart()).toEqual({ hashes: 0, checks: 2 });
    await usersAnswerToCloudsYaml();
    scrypt.hashes = scrypt.checks = 0;
    expect(await restart()).toEqual({ hashes: 0, checks: 0 });
  });
});

/**
 * The operator console in a real headless browser (Debian's chromium, driven by playwright-core,
 * which downloads no browser of its own): the page the local stack serves at /ferry/console, signed
 * in through its address (#token=admin:admin), while a host-assisted share migration runs. The
 * test reads the same page as it redraws: the migration's row appears, its percentage changes, it
 * reaches phase 1's end; a failed migration shows under recent failures with its reason; the
 * replicated backend shows its replication state, and the last audit (the reconciler's pass at the
 * stack's start) is there. It saves a screenshot of the page as docs/console.png when
 * FERRY_CONSOLE_SCREENSHOT=1 (how the README's picture is made), in the test's temp dir otherwise.
 */
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { clearFaults, injectFault } from '../../functions/core/faults.js';
import { REPO_ROOT } from '../../infra/local/http.js';
import { fillShare, manilaClient, migrationStartBody } from '../support/manila.js';
import { eventually } from '../support/poll.js';
import { useLocalStack, type TestLocalStack } from '../support/stack.js';

const CHROMIUM = process.env.FERRY_CHROMIUM ?? '/usr/bin/chromium';
const MIB = 1024 * 1024;
const savedRate = process.env.FERRY_COPY_BYTES_PER_SECOND;

let stack: TestLocalStack;
let browser: Browser;
let page: Page;
const m = manilaClient(() => stack.url);

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`no browser at ${CHROMIUM}: run scripts/ensure-system.sh test (Debian package chromium), or set FERRY_CHROMIUM`);
  stack = await useLocalStack();
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
}, 120_000);
afterAll(async () => {
  clearFaults();
  await browser?.close();
  await stack?.stop();
  if (savedRate === undefined) delete process.env.FERRY_COPY_BYTES_PER_SECOND;
  else process.env.FERRY_COPY_BYTES_PER_SECOND = savedRate;
});

/** The percentage the page shows for `ref` now, or undefined while it has no row for it. */
async function percentOnPage(ref: string): Promise<number | undefined> {
  const text = await page.locator(`#inflight tr[data-ref="${ref}"] .percent`).textContent({ timeout: 100 }).catch(() => null);
  const m = text ? /^(\d+) %$/.exec(text.trim()) : null;
  return m ? Number(m[1]) : undefined;
}

describe('the operator console in headless Chromium', () => {
  test('a share migration: its row appears, its progress changes on the same page, phase 1 ends; a failed one shows its reason', async () => {
    // Prepare: 6 MiB to copy at 1 MiB/s, and the page open before the migration starts.
    const { id, path } = await m.availableShare('nfs-a', { name: 'on-the-console' });
    await fillShare(path, { bigBytes: 6 * MIB, files: 30 });
    const typeC = await m.typePinnedTo('nfs-c');
    process.env.FERRY_COPY_BYTES_PER_SECOND = String(MIB);
    await page.goto(`${stack.url}/ferry/console#token=admin:admin&interval=300`);
    await page.locator('#inflight').getByText('nothing in flight').waitFor({ timeout: 30_000 });
    // The backends and the last audit are there from the first refresh.
    await expect(page.locator('tr[data-backend="ferry@lvm-r"]').textContent()).resolves.toMatch(/enabled/);
    await expect(page.locator('#audit').textContent()).resolves.toMatch(/\d+ findings?, \d+ repaired, \d+ left/);

    // Act
    expect((await m.action(id, migrationStartBody('ferry@nfs-c#pool0', {}, { new_share_type_id: typeC }))).status).toBe(202);
    const ref = `share:${id}`;
    const seen: number[] = [];
    await eventually(
      async (note) => {
        const p = await percentOnPage(ref);
        if (p !== undefined && seen[seen.length - 1] !== p) seen.push(p);
        note(seen);
        return seen.filter((x) => x > 0 && x < 100).length >= 2 ? true : undefined;
      },
      'the page to show the migration at two different percentages below 100',
      { timeoutMs: 90_000, intervalMs: 100 },
    );
    const row = page.locator(`#inflight tr[data-ref="${ref}"]`);
    expect(await row.locator('.step').textContent()).toMatch(/host-assisted: copying data/);
    await page.screenshot({ path: process.env.FERRY_CONSOLE_SCREENSHOT === '1' ? join(REPO_ROOT, 'docs', 'console.png') : join(await mkdtemp(join(tmpdir(), 'ferry-console-')), 'console.png') });
    // Assess: the same row reaches the end of phase 1 (the page was never reloaded).
    await eventually(async () => ((await row.getAttribute('data-status', { timeout: 100 }).catch(() => null)) === 'waiting' ? true : undefined), 'phase 1 done on the page', 90_000);
    expect(await percentOnPage(ref)).toBe(100);
    expect(await row.locator('.step').textContent()).toMatch(/phase 1 done \(host-assisted\): waiting for migration-complete/);
    expect([...seen].sort((a, b) => a - b)).toEqual(seen);

    // A migration whose copy fails shows under recent failures, with its reason.
    const doomed = await m.availableShare('nfs-a', { name: 'doomed-on-the-console' });
    await fillShare(doomed.path, { bigBytes: MIB, files: 5 });
    injectFault({ kind: 'copy', method: 'copy_file', mode: 'fail', message: 'injected: disk on fire' });
    try {
      expect((await m.action(doomed.id, migrationStartBody('ferry@nfs-c#pool0', {}, { new_share_type_id: typeC }))).status).toBe(202);
      const failure = page.locator(`#failures tr[data-ref="share:${doomed.id}"] .reason`);
      await failure.waitFor({ timeout: 90_000 });
      expect(await failure.textContent()).toMatch(/failed: Share migration failed: the data copy failed 3 times; last: .*disk on fire/);
    } finally {
      clearFaults();
    }
  }, 240_000);

  test('GET /ferry/ops without an admin token: 401 without one, 403 for a member', async () => {
    expect((await fetch(`${stack.url}/ferry/ops`)).status).toBe(401);
    const member = await fetch(`${stack.url}/ferry/ops`, { headers: { 'X-Auth-Token': 'demo:demo' } });
    expect(member.status).toBe(403);
  });
});

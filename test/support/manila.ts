/**
 * Helpers for tests that drive the Manila API of a local stack over HTTP: requests with the
 * version and experimental headers, waiting for a share's status or task_state, share types
 * pinned to one backend, and a share with data in it.
 */
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { chmod, link, mkdir, symlink, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually } from './poll.js';

export interface ManilaResponse {
  status: number;
  body: any;
  headers: Headers;
}

export function manilaClient(url: () => string) {
  async function api(method: string, path: string, body?: unknown, opts: { token?: string; version?: string; experimental?: boolean } = {}): Promise<ManilaResponse> {
    const res = await fetch(`${url()}/share/v2${path}`, {
      method,
      headers: {
        'X-Auth-Token': opts.token ?? 'admin:admin',
        'X-OpenStack-Manila-API-Version': opts.version ?? '2.72',
        Accept: 'application/json',
        ...(opts.experimental === false ? {} : { 'X-OpenStack-Manila-API-Experimental': 'true' }),
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
  }

  const action = (id: string, body: unknown, opts?: Parameters<typeof api>[3]) => api('POST', `/shares/${id}/action`, body, opts);

  async function share(id: string): Promise<Record<string, any>> {
    const res = await api('GET', `/shares/${id}`);
    if (res.status !== 200) throw new Error(`GET share ${id}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.share;
  }

  /** Waits until the share's task_state is one of `wanted` (fails fast on an unexpected terminal state). */
  async function taskStateBecomes(id: string, wanted: string[], timeoutMs = 120_000): Promise<Record<string, any>> {
    return eventually(
      async (note) => {
        const s = await share(id);
        if (wanted.includes(note(s).task_state)) return s;
        const terminal = ['migration_success', 'migration_error', 'migration_cancelled'];
        if (terminal.includes(s.task_state) && !wanted.includes(s.task_state)) {
          const { getShare } = await import('../../functions/shares/repo.js');
          const why = await getShare(id).then((r) => r?.errorReason ?? r?.migration?.error, () => undefined);
          throw new Error(`share ${id} ended in ${s.task_state}, waiting for ${wanted.join('|')}${why ? `: ${why}` : ''}`);
        }
        return undefined;
      },
      `share ${id} task_state ${wanted.join('|')}`,
      timeoutMs,
    );
  }

  async function statusBecomes(id: string, wanted: string[], timeoutMs = 60_000): Promise<Record<string, any>> {
    return eventually(async (note) => {
      const s = await share(id);
      return wanted.includes(note(s).status) ? s : undefined;
    }, `share ${id} status ${wanted.join('|')}`, timeoutMs);
  }

  /** A share type that lands on one backend (`share_backend_name`), created once. */
  async function typePinnedTo(backend: string): Promise<string> {
    const name = `on-${backend}`;
    const existing = await api('GET', `/types/${name}`);
    if (existing.status === 200) return existing.body.share_type.id;
    const created = await api('POST', '/types', { share_type: { name, extra_specs: { driver_handles_share_servers: 'False', share_backend_name: backend } } });
    if (created.status !== 200) throw new Error(`type ${name}: ${created.status} ${JSON.stringify(created.body)}`);
    return created.body.share_type.id;
  }

  /** An available share on `backend`, returning its id and export path. */
  async function availableShare(backend: string, opts: { size?: number; name?: string; proto?: string } = {}): Promise<{ id: string; path: string }> {
    await typePinnedTo(backend);
    const created = await api('POST', '/shares', { share: { share_proto: opts.proto ?? 'NFS', size: opts.size ?? 1, name: opts.name ?? 'm', share_type: `on-${backend}` } });
    if (created.status !== 202) throw new Error(`create share: ${created.status} ${JSON.stringify(created.body)}`);
    const id = created.body.share.id;
    const s = await statusBecomes(id, ['available', 'error']);
    if (s.status !== 'available') throw new Error(`share ${id} ended ${s.status}`);
    const els = await api('GET', `/shares/${id}/export_locations`);
    return { id, path: els.body.export_locations[0].path };
  }

  return { api, action, share, taskStateBecomes, statusBecomes, typePinnedTo, availableShare };
}

/** The migration_start body as the CLI sends it (flags as "True"/"False" strings). */
export function migrationStartBody(host: string, flags: Partial<Record<'writable' | 'preserve_metadata' | 'nondisruptive' | 'preserve_snapshots' | 'force_host_assisted_migration', boolean>> = {}, extra: Record<string, unknown> = {}) {
  const s = (b: boolean | undefined) => (b ? 'True' : 'False');
  return {
    migration_start: {
      host,
      force_host_assisted_migration: flags.force_host_assisted_migration ?? false,
      preserve_metadata: s(flags.preserve_metadata),
      preserve_snapshots: s(flags.preserve_snapshots),
      writable: s(flags.writable),
      nondisruptive: s(flags.nondisruptive),
      new_share_network_id: null,
      new_share_type_id: null,
      ...extra,
    },
  };
}

/** Fills a share directory with a small tree: nested files, a larger file, a symlink, a hard link, odd modes and times. */
export async function fillShare(root: string, opts: { bigBytes?: number; files?: number } = {}): Promise<void> {
  await mkdir(join(root, 'docs', 'deep'), { recursive: true });
  for (let i = 0; i < (opts.files ?? 20); i++) await writeFile(join(root, 'docs', `f${i}.txt`), `file ${i}\n`.repeat(i + 1));
  await writeFile(join(root, 'docs', 'deep', 'note.md'), '# deep\n');
  const big = Buffer.alloc(opts.bigBytes ?? 3 * 1024 * 1024);
  for (let i = 0; i < big.length; i += 4096) big.writeUInt32LE(i, i);
  await writeFile(join(root, 'big.bin'), big);
  await symlink('docs/f1.txt', join(root, 'link-to-f1'));
  await link(join(root, 'docs', 'f2.txt'), join(root, 'hard-f2'));
  await chmod(join(root, 'docs', 'f3.txt'), 0o640);
  await utimes(join(root, 'docs', 'f4.txt'), new Date('2020-01-02T03:04:05Z'), new Date('2020-01-02T03:04:05Z'));
}

/**
 * What must survive a migration, by relative path: content hash, mode and mtime (to the second)
 * of files, symlink targets, directory modes, and which names share an inode (hard links).
 * The root's own mode is left out: the backend sets it (read-only casts change it).
 */
export function shareDigest(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const inodes = new Map<string, string[]>();
  const walk = (rel: string) => {
    for (const name of readdirSync(join(root, rel)).sort()) {
      if (name.startsWith('.ferry-copy-')) continue;
      const path = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, path));
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isDirectory()) {
        out[path + '/'] = `dir ${mode}`;
        walk(path);
      } else if (st.isSymbolicLink()) out[path] = `-> ${readlinkSync(join(root, path))}`;
      else if (st.isFile()) {
        out[path] = `${createHash('sha256').update(readFileSync(join(root, path))).digest('hex')} ${mode} ${Math.floor(st.mtimeMs / 1000)}`;
        if (st.nlink > 1) inodes.set(String(st.ino), [...(inodes.get(String(st.ino)) ?? []), path]);
      }
    }
  };
  walk('');
  for (const names of inodes.values()) if (names.length > 1) out[`hardlinks:${names[0]}`] = names.join(' = ');
  return out;
}

/**
 * What the migration tests run with: the Wait states and Retry intervals of the local stack at
 * 1/100 (the driver's 5 s poll is 50 ms) and one file per migration_continue slice, so the
 * driver-assisted loop really loops. Sets them (and clears `alsoClear`) for a test file; returns
 * the function that puts every one of them back (afterAll).
 */
export function useFastMigrationEnv(alsoClear: string[] = ['FERRY_COPY_BYTES_PER_SECOND']): () => void {
  const values: Record<string, string | undefined> = { FERRY_LOCAL_WAIT_SCALE: '0.01', FERRY_SHARE_MIGRATION_SLICE_MS: '0' };
  for (const k of alsoClear) values[k] = undefined;
  const saved = Object.fromEntries(Object.keys(values).map((k) => [k, process.env[k]]));
  const set = (k: string, v: string | undefined) => (v === undefined ? delete process.env[k] : (process.env[k] = v));
  for (const [k, v] of Object.entries(values)) set(k, v);
  return () => {
    for (const [k, v] of Object.entries(saved)) set(k, v);
  };
}

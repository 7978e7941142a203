/**
 * GET /attachments[/detail] as a query over the caller's (or, for admins with all_tenants, every)
 * attachment: upstream's filter columns, sort keys, marker and limit.
 */
import { own } from '../core/lookup.js';
import type { AuthContext } from '../core/auth.js';
import { BadRequest, NotFound } from '../core/errors.js';
import type { Attachment } from './model.js';
import { queryProjectAttachments, scanAllAttachments } from './repo.js';

export type SortDir = 'asc' | 'desc';

export interface ListAttachmentsInput {
  auth: AuthContext;
  /** Honoured for admins only, as upstream. */
  allTenants?: boolean;
  /** Column filters with API names (`volume_id`, `instance_uuid`, `attach_status`, ...). An unknown column matches nothing, as upstream. */
  filters?: Record<string, string>;
  sort?: { key: string; dir: SortDir }[];
  marker?: string;
  limit?: number;
  offset?: number;
}

/** Filterable and sortable columns: API name -> attachment field. */
export const ATTACHMENT_COLUMNS: Record<string, keyof Attachment> = {
  id: 'id',
  volume_id: 'volumeId',
  instance_uuid: 'instanceUuid',
  attach_status: 'attachStatus',
  attach_mode: 'attachMode',
  attached_host: 'attachedHost',
  mountpoint: 'mountpoint',
  volume_host: 'volumeHost',
  attach_time: 'attachTime',
  detach_time: 'detachTime',
  created_at: 'createdAt',
  updated_at: 'updatedAt',
};

/** osapi_max_limit */
export const MAX_LIMIT = 1000;
export const DEFAULT_SORT: { key: string; dir: SortDir }[] = [{ key: 'created_at', dir: 'desc' }];

function compareBy(sort: { key: string; dir: SortDir }[]) {
  const keys = [...sort, ...(sort.some((s) => s.key === 'id') ? [] : [{ key: 'id', dir: sort[sort.length - 1]?.dir ?? 'desc' }])];
  return (a: Attachment, b: Attachment): number => {
    for (const { key, dir } of keys) {
      const field = own(ATTACHMENT_COLUMNS, key)!;
      const x = String(a[field] ?? '');
      const y = String(b[field] ?? '');
      if (x !== y) return (x < y ? -1 : 1) * (dir === 'asc' ? 1 : -1);
    }
    return 0;
  };
}

/** GET /attachments[/detail]: the page and whether more follow. */
export async function listAttachments(input: ListAttachmentsInput): Promise<{ attachments: Attachment[]; more: boolean }> {
  const sort = input.sort?.length ? input.sort : DEFAULT_SORT;
  for (const s of sort) {
    if (!own(ATTACHMENT_COLUMNS, s.key)) throw new BadRequest(`Invalid input received: Invalid sort key ${s.key}`);
  }
  const filters = Object.entries(input.filters ?? {});
  if (filters.some(([k]) => !own(ATTACHMENT_COLUMNS, k))) return { attachments: [], more: false };

  const all = input.allTenants && input.auth.isAdmin ? await scanAllAttachments() : await queryProjectAttachments(input.auth.projectId);
  const matching = all
    .filter((a) => !a.deleted && filters.every(([k, v]) => String(a[own(ATTACHMENT_COLUMNS, k)!] ?? '') === v))
    .sort(compareBy(sort));
  let start = input.offset ?? 0;
  if (input.marker) {
    const i = matching.findIndex((a) => a.id === input.marker);
    if (i < 0) throw new NotFound(`Marker ${input.marker} could not be found.`);
    start += i + 1;
  }
  const limit = Math.min(input.limit ?? MAX_LIMIT, MAX_LIMIT);
  const page = matching.slice(start, start + limit);
  return { attachments: page, more: start + limit < matching.length };
}

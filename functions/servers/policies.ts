/**
 * The policies of the servers routes (nova 26.2.2's names with their defaults) and who may see a
 * server at all: what every servers route and flow API checks first.
 */
import type { ApiRequest } from '../core/api.js';
import { registerPolicies } from '../core/policy.js';
import { findServer, serverNotFound, type LoadedServer } from './repo.js';

export const SERVER_POLICIES = {
  index: 'os_compute_api:servers:index',
  detail: 'os_compute_api:servers:detail',
  allTenants: 'os_compute_api:servers:index:get_all_tenants',
  show: 'os_compute_api:servers:show',
  create: 'os_compute_api:servers:create',
  delete: 'os_compute_api:servers:delete',
  start: 'os_compute_api:servers:start',
  stop: 'os_compute_api:servers:stop',
  reboot: 'os_compute_api:servers:reboot',
  attachmentsIndex: 'os_compute_api:os-volumes-attachments:index',
  attachmentsShow: 'os_compute_api:os-volumes-attachments:show',
  attachmentsCreate: 'os_compute_api:os-volumes-attachments:create',
  attachmentsUpdate: 'os_compute_api:os-volumes-attachments:update',
  attachmentsSwap: 'os_compute_api:os-volumes-attachments:swap',
  attachmentsDelete: 'os_compute_api:os-volumes-attachments:delete',
  actionsList: 'os_compute_api:os-instance-actions:list',
  actionsShow: 'os_compute_api:os-instance-actions:show',
  migrationsIndex: 'os_compute_api:os-migrations:index',
  serverMigrationsIndex: 'os_compute_api:servers:migrations:index',
  imagesIndex: 'os_compute_api:image-api',
} as const;

registerPolicies({
  [SERVER_POLICIES.index]: 'admin_or_owner',
  [SERVER_POLICIES.detail]: 'admin_or_owner',
  [SERVER_POLICIES.allTenants]: 'admin_api',
  [SERVER_POLICIES.show]: 'admin_or_owner',
  [SERVER_POLICIES.create]: 'admin_or_owner',
  [SERVER_POLICIES.delete]: 'admin_or_owner',
  [SERVER_POLICIES.start]: 'admin_or_owner',
  [SERVER_POLICIES.stop]: 'admin_or_owner',
  [SERVER_POLICIES.reboot]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsIndex]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsShow]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsCreate]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsUpdate]: 'admin_or_owner',
  [SERVER_POLICIES.attachmentsSwap]: 'admin_api',
  [SERVER_POLICIES.attachmentsDelete]: 'admin_or_owner',
  [SERVER_POLICIES.actionsList]: 'admin_or_owner',
  [SERVER_POLICIES.actionsShow]: 'admin_or_owner',
  [SERVER_POLICIES.migrationsIndex]: 'admin_api',
  [SERVER_POLICIES.serverMigrationsIndex]: 'admin_api',
  [SERVER_POLICIES.imagesIndex]: '@',
});

/** The server if the caller may see it (project-scoped; admins see all), else Nova's 404. */
export async function visibleServer(req: ApiRequest, id: string): Promise<LoadedServer> {
  const found = await findServer(id);
  if (!found || found.instance.hidden || (!req.auth.isAdmin && found.instance.projectId !== req.auth.projectId)) throw serverNotFound(id);
  return found;
}

/**
 * The policy names of the Nova foundation routes (nova 26.2.2, nova/policies/*.py) where upstream
 * has one, registered with their defaults.
 */
import { registerPolicies } from '../core/policy.js';

/** The policy names of nova 26.2.2 (nova/policies/*.py) where upstream has one; their defaults. */
export const COMPUTE_POLICIES = {
  flavorsIndex: 'os_compute_api:flavors:index',
  flavorsDetail: 'os_compute_api:flavors:detail',
  flavorsShow: 'os_compute_api:flavors:show',
  extraSpecsIndex: 'os_compute_api:os-flavor-extra-specs:index',
  extraSpecsShow: 'os_compute_api:os-flavor-extra-specs:show',
  servicesList: 'os_compute_api:os-services:list',
  servicesUpdate: 'os_compute_api:os-services:update',
  hypervisorsList: 'os_compute_api:os-hypervisors:list',
  hypervisorsListDetail: 'os_compute_api:os-hypervisors:list-detail',
  hypervisorsShow: 'os_compute_api:os-hypervisors:show',
  hypervisorsStatistics: 'os_compute_api:os-hypervisors:statistics',
  hypervisorsUptime: 'os_compute_api:os-hypervisors:uptime',
  hypervisorsSearch: 'os_compute_api:os-hypervisors:search',
  hypervisorsServers: 'os_compute_api:os-hypervisors:servers',
  azList: 'os_compute_api:os-availability-zone:list',
  azDetail: 'os_compute_api:os-availability-zone:detail',
} as const;

registerPolicies({
  // Flavors have no policy upstream (any authenticated user); extra specs are project readers'.
  [COMPUTE_POLICIES.flavorsIndex]: '@',
  [COMPUTE_POLICIES.flavorsDetail]: '@',
  [COMPUTE_POLICIES.flavorsShow]: '@',
  [COMPUTE_POLICIES.extraSpecsIndex]: '@',
  [COMPUTE_POLICIES.extraSpecsShow]: '@',
  [COMPUTE_POLICIES.servicesList]: 'admin_api',
  [COMPUTE_POLICIES.servicesUpdate]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsList]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsListDetail]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsShow]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsStatistics]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsUptime]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsSearch]: 'admin_api',
  [COMPUTE_POLICIES.hypervisorsServers]: 'admin_api',
  [COMPUTE_POLICIES.azList]: '@',
  [COMPUTE_POLICIES.azDetail]: 'admin_api',
});

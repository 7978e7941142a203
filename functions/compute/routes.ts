/**
 * The Nova v2.1 foundation routes (nova 26.2.2, reference §3): flavors and their extra specs
 * (flavor-routes.ts), os-services and os-availability-zone (service-routes.ts), os-hypervisors
 * (hypervisor-routes.ts). Validation in upstream's order and wording, policies where upstream's
 * are (policies.ts). The servers routes sit a layer above and are composed with these by the
 * entry point (functions/api/compute.ts).
 */
import type { RouteSpec } from '../core/api.js';
import { flavorRoutes } from './flavor-routes.js';
import { hypervisorRoutes } from './hypervisor-routes.js';
import { availabilityZoneRoutes, serviceRoutes } from './service-routes.js';

/** Every foundation route of the Nova API (functions/api/compute.ts adds the servers routes). */
export const FOUNDATION_ROUTES: RouteSpec[] = [...flavorRoutes, ...serviceRoutes, ...hypervisorRoutes, ...availabilityZoneRoutes];

/** Cinder v3 attachments API routes. TODO(attachments helper). */
import type { RouteSpec } from '../core/api.js';

export const attachmentRoutes: RouteSpec[] = [];

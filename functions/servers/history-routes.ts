/**
 * A server's history and the image proxy: os-instance-actions (list, show), os-migrations and a
 * server's in-progress live migrations, and `/images` (the image API proxy before 2.36).
 */
import { json, type ApiRequest, type ApiResponse, type RouteSpec } from '../core/api.js';
import { NotFound } from '../core/errors.js';
import { authorize } from '../core/policy.js';
import type { LinkContext } from '../compute/views.js';
import { instanceActionDetailView, instanceActionView, migrationView, serverMigrationView } from './history-views.js';
import { findImage, listImages } from './images.js';
import { listShownMigrations } from './migrations.js';
import { SERVER_POLICIES, visibleServer } from './policies.js';
import { loadPartition } from './repo.js';

const linkContext = (req: ApiRequest): LinkContext => ({ baseUrl: req.baseUrl, urlProjectId: req.urlProjectId });

async function listActions(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.actionsList, { projectId: server.instance.projectId });
  const { actions } = await loadPartition(server.cell, server.instance.uuid);
  const viewer = { isAdmin: req.auth.isAdmin, instanceProjectId: server.instance.projectId };
  return json(200, { instanceActions: [...actions].reverse().map((a) => instanceActionView(a, req.version, viewer)) });
}

async function showAction(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  authorize(req.auth, SERVER_POLICIES.actionsShow, { projectId: server.instance.projectId });
  const { actions } = await loadPartition(server.cell, server.instance.uuid);
  const action = actions.find((a) => a.requestId === req.params.request_id);
  if (!action) throw new NotFound(`Action for request_id ${req.params.request_id} on instance ${server.instance.uuid} not found`);
  return json(200, { instanceAction: instanceActionDetailView(action, req.version, { isAdmin: req.auth.isAdmin, instanceProjectId: server.instance.projectId }) });
}

async function listAllMigrations(req: ApiRequest): Promise<ApiResponse> {
  const instanceUuid = req.query.get('instance_uuid');
  const status = req.query.get('status');
  const type = req.query.get('migration_type');
  const host = req.query.get('host');
  const all = (await listShownMigrations())
    .filter((m) => !instanceUuid || m.instanceUuid === instanceUuid)
    .filter((m) => !status || m.status === status)
    .filter((m) => !type || m.migrationType === type)
    .filter((m) => !host || m.sourceCompute === host || m.destCompute === host)
    .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id - a.id);
  return json(200, { migrations: all.map((m) => migrationView(m, req.version, linkContext(req))) });
}

async function listServerMigrations(req: ApiRequest): Promise<ApiResponse> {
  const server = await visibleServer(req, req.params.server_id!);
  const inProgress = ['queued', 'preparing', 'running', 'post-migrating'];
  const all = (await listShownMigrations())
    .filter((m) => m.instanceUuid === server.instance.uuid && m.migrationType === 'live-migration' && inProgress.includes(m.status));
  return json(200, { migrations: all.map((m) => serverMigrationView(m, req.version)) });
}

async function imagesIndex(req: ApiRequest, detail: boolean): Promise<ApiResponse> {
  const images = await listImages(req.auth.projectId, req.auth.isAdmin);
  const view = (i: Awaited<ReturnType<typeof listImages>>[number]) => ({
    id: i.id,
    name: i.name,
    links: [{ rel: 'self', href: `${req.baseUrl}/images/${i.id}` }],
    ...(detail ? { status: i.status.toUpperCase(), minDisk: i.minDisk, minRam: i.minRam, progress: 100, created: i.createdAt.replace(/\.\d+Z$/, 'Z'), updated: i.updatedAt.replace(/\.\d+Z$/, 'Z'), metadata: i.properties, 'OS-EXT-IMG-SIZE:size': i.sizeBytes } : {}),
  });
  return json(200, { images: images.map(view) });
}

async function imageShow(req: ApiRequest): Promise<ApiResponse> {
  const image = await findImage(req.params.image_id!);
  if (!image || (image.visibility !== 'public' && image.ownerProjectId !== req.auth.projectId && !req.auth.isAdmin)) throw new NotFound('Image not found.');
  return json(200, {
    image: {
      id: image.id,
      name: image.name,
      status: image.status.toUpperCase(),
      minDisk: image.minDisk,
      minRam: image.minRam,
      progress: 100,
      metadata: image.properties,
      'OS-EXT-IMG-SIZE:size': image.sizeBytes,
      links: [{ rel: 'self', href: `${req.baseUrl}/images/${image.id}` }],
    },
  });
}

export const HISTORY_ROUTES: RouteSpec[] = [
  { method: 'GET', path: '/servers/{server_id}/os-instance-actions', action: SERVER_POLICIES.actionsList, authorizeBy: 'resource', handler: listActions },
  { method: 'GET', path: '/servers/{server_id}/os-instance-actions/{request_id}', action: SERVER_POLICIES.actionsShow, authorizeBy: 'resource', handler: showAction },
  { method: 'GET', path: '/servers/{server_id}/migrations', action: SERVER_POLICIES.serverMigrationsIndex, handler: listServerMigrations },
  { method: 'GET', path: '/os-migrations', action: SERVER_POLICIES.migrationsIndex, handler: listAllMigrations },
  { method: 'GET', path: '/images', action: SERVER_POLICIES.imagesIndex, maxVersion: '2.35', handler: (req) => imagesIndex(req, false) },
  { method: 'GET', path: '/images/detail', action: SERVER_POLICIES.imagesIndex, maxVersion: '2.35', handler: (req) => imagesIndex(req, true) },
  { method: 'GET', path: '/images/{image_id}', action: SERVER_POLICIES.imagesIndex, maxVersion: '2.35', handler: imageShow },
];

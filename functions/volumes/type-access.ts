/**
 * Volume type access (C/api/contrib/volume_type_access.py, volume_types.add_volume_type_access /
 * remove_volume_type_access): a private type's access list, the projects that may see and use it
 * (types.ts typeVisibleTo). `GET /types/{id}/os-volume-type-access` lists it; the
 * addProjectAccess / removeProjectAccess actions of `POST /types/{id}/action` change it, each one
 * conditional update of the type item: the type exists and is private, and the project is not yet
 * (add) or is (remove) on the list. A refused condition is re-read to name upstream's error.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { json, type ApiRequest, type RouteSpec } from '../core/api.js';
import { isConditionFailure, db } from '../core/db.js';
import { BadRequest, Conflict, NotFound } from '../core/errors.js';
import { authorize, registerPolicies } from '../core/policy.js';
import { tableName } from '../core/tables.js';
import { getVolumeTypeById, volumeTypeKey, type VolumeType } from './types.js';
import { invalidField, isObject, pyRepr } from './validation.js';

const P = {
  list: 'volume_extension:volume_type_access:get_all_for_type',
  add: 'volume_extension:volume_type_access:addProjectAccess',
  remove: 'volume_extension:volume_type_access:removeProjectAccess',
};
registerPolicies({ [P.list]: 'admin_api', [P.add]: 'admin_api', [P.remove]: 'admin_api' });

const PUBLIC_TYPE = 'Invalid volume type: Type access modification is not applicable to public volume type.';
const accessNotFound = (typeId: string, project: string) => new NotFound(`Volume type access not found for ${typeId} / ${project} combination.`);
const accessExists = (typeId: string, project: string) => new Conflict(`Volume type access for ${typeId} / ${project} combination already exists.`);

async function listAccess(req: ApiRequest) {
  authorize(req.auth, P.list, {});
  const t = await getVolumeTypeById(req.params.type_id!);
  if (t.isPublic) throw new NotFound('Access list not available for public volume types.');
  return json(200, { volume_type_access: t.projects.map((p) => ({ volume_type_id: t.id, project_id: p })) });
}

/** schemas/volume_type_access.py: `{"<action>": {"project": <string 1-255>}}`, nothing else. */
function projectOf(action: string, body: Record<string, unknown>): string {
  const extra = Object.keys(body).find((k) => k !== action);
  if (extra !== undefined) throw new BadRequest(`Additional properties are not allowed (${pyRepr(extra)} was unexpected)`);
  const args = body[action];
  if (!isObject(args)) throw invalidField(action, args, `${pyRepr(args)} is not of type 'object'`);
  const more = Object.keys(args).find((k) => k !== 'project');
  if (more !== undefined) throw invalidField(action, args, `Additional properties are not allowed (${pyRepr(more)} was unexpected)`);
  if (!('project' in args)) throw invalidField(action, args, "'project' is a required property");
  const p = args.project;
  if (typeof p !== 'string') throw invalidField('project', p, `${pyRepr(p)} is not of type 'string'`);
  if (p.length < 1) throw invalidField('project', p, `${pyRepr(p)} is too short`);
  if (p.length > 255) throw invalidField('project', p, `${pyRepr(p)} is too long`);
  return p;
}

/** The conditional ADD / DELETE of one project on the type's access set. */
async function changeAccess(typeId: string, project: string, add: boolean): Promise<void> {
  try {
    await db().send(
      new UpdateCommand({
        TableName: tableName('volume'),
        Key: volumeTypeKey(typeId),
        UpdateExpression: `${add ? 'ADD' : 'DELETE'} projects :p`,
        ConditionExpression: `attribute_exists(pk) AND isPublic = :false AND ${add ? 'NOT ' : ''}contains(projects, :project)`,
        ExpressionAttributeValues: { ':p': new Set([project]), ':false': false, ':project': project },
      }),
    );
  } catch (e) {
    if (!isConditionFailure(e)) throw e;
    // Which part refused it, in upstream's order: the type, its publicity, the list.
    const t: VolumeType = await getVolumeTypeById(typeId);
    if (t.isPublic) throw new BadRequest(PUBLIC_TYPE);
    throw add ? accessExists(typeId, project) : accessNotFound(typeId, project);
  }
}

/** POST /types/{id}/action: addProjectAccess (202, 409 when already there) and removeProjectAccess (202, 404 when not there). */
async function typeAction(req: ApiRequest) {
  const body = req.body;
  if (!isObject(body) || Object.keys(body).length === 0) throw new BadRequest('Malformed request body');
  const typeId = req.params.type_id!;
  if ('addProjectAccess' in body) {
    authorize(req.auth, P.add, {});
    await changeAccess(typeId, projectOf('addProjectAccess', body), true);
    return json(202);
  }
  if ('removeProjectAccess' in body) {
    authorize(req.auth, P.remove, {});
    await changeAccess(typeId, projectOf('removeProjectAccess', body), false);
    return json(202);
  }
  throw new BadRequest(`There is no such action: ${Object.keys(body)[0]}`);
}

export const typeAccessRoutes: RouteSpec[] = [
  { method: 'GET', path: '/types/{type_id}/os-volume-type-access', action: P.list, handler: listAccess },
  { method: 'POST', path: '/types/{type_id}/action', action: P.add, authorizeBy: 'resource', handler: typeAction },
];

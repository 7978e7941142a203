/**
 * A volume's image metadata actions (C/api/contrib/volume_image_metadata.py): os-set_image_metadata
 * merges keys into volume_image_metadata and answers all of it, os-unset_image_metadata removes one
 * key (GlanceMetadataNotFound, 404, when the volume has no such key: the transition checks it), os-show_image_metadata answers it. Each change is the
 * pure transition `image-metadata` (transitions.ts), written under the volume's version.
 */
import { json, type ApiRequest } from '../core/api.js';
import { authorize, registerPolicies } from '../core/policy.js';
import type { Volume } from './model.js';
import { updateVolume } from './repo.js';
import { invalidField, isObject, metadataField, pyRepr, requiredProperty } from './validation.js';

export const IMAGE_METADATA_POLICIES = {
  show: 'volume_extension:volume_image_metadata:show',
  set: 'volume_extension:volume_image_metadata:set',
  remove: 'volume_extension:volume_image_metadata:remove',
} as const;

registerPolicies({
  [IMAGE_METADATA_POLICIES.show]: 'admin_or_owner',
  [IMAGE_METADATA_POLICIES.set]: 'admin_or_owner',
  [IMAGE_METADATA_POLICIES.remove]: 'admin_or_owner',
});

const now = () => new Date().toISOString();

/** os-set_image_metadata {"metadata": {...}}: 200 {"metadata": every key the volume now has}. */
export async function setImageMetadata(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, IMAGE_METADATA_POLICIES.set, { projectId: v.projectId });
  if (!isObject(args)) throw invalidField('os-set_image_metadata', args, `${pyRepr(args)} is not of type 'object'`);
  const metadata = metadataField(args);
  if (metadata === undefined) throw requiredProperty('metadata');
  const after = await updateVolume(v.id, { type: 'image-metadata', at: now(), set: metadata });
  return json(200, { metadata: after.imageMetadata ?? {} });
}

/** os-unset_image_metadata {"key": k}: 200 with no body; a key the volume lacks is GlanceMetadataNotFound (404). */
export async function unsetImageMetadata(req: ApiRequest, v: Volume, args: unknown) {
  authorize(req.auth, IMAGE_METADATA_POLICIES.remove, { projectId: v.projectId });
  if (!isObject(args) || !('key' in args)) throw requiredProperty('key');
  const key = args.key;
  if (typeof key !== 'string') throw invalidField('key', key, `${pyRepr(key)} is not of type 'string'`);
  if (key.length < 1 || key.length > 255) throw invalidField('key', key, `${pyRepr(key)} is ${key.length ? 'too long' : 'too short'}`);
  await updateVolume(v.id, { type: 'image-metadata', at: now(), remove: key });
  return json(200);
}

/** os-show_image_metadata: 200 {"metadata": {...}} ({} for a volume with none). */
export async function showImageMetadata(req: ApiRequest, v: Volume) {
  authorize(req.auth, IMAGE_METADATA_POLICIES.show, { projectId: v.projectId });
  return json(200, { metadata: v.imageMetadata ?? {} });
}

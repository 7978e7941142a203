/**
 * Version discovery documents, as the OpenStack services answer them (C/api/versions.py and its
 * Manila twin), for any ServiceVersions: `GET <root>/` lists the versions (300 Multiple Choices,
 * as upstream's VersionsController.all), `GET <root>/v<N>/` lists them too with 200 (its `index`:
 * a `versions` list, not Nova's `version` object), and `GET <root>/v<N>` redirects there (302, the
 * v<N> router's `mapper.redirect("", "/")`). No token is needed for any.
 *
 * What the CLIs read (reference §4.2/§4.3): the first entry whose `version` has the major, its
 * `version` (max microversion) and `min_version`.
 */
import type { ApiResponse, UnversionedRoute } from '../core/api.js';
import type { ServiceVersions } from '../core/microversion.js';

export interface VersionInfo {
  service: ServiceVersions;
  /** `v3.0`, `v2.0`, `v2.1` */
  id: string;
  /** `/v3` — the versioned base under the root. */
  versionPath: string;
  /** When the newest microversion was added (upstream's UPDATED). */
  updated: string;
  /** `application/vnd.openstack.volume+json;version=3` */
  mediaType: string;
}

export function versionEntry(info: VersionInfo, rootUrl: string): Record<string, unknown> {
  const { service } = info;
  return {
    id: info.id,
    status: 'CURRENT',
    version: `${service.major}.${service.maxMinor}`,
    min_version: `${service.major}.${service.minMinor}`,
    updated: info.updated,
    links: [
      { rel: 'describedby', type: 'text/html', href: 'https://docs.openstack.org/' },
      { rel: 'self', href: `${rootUrl}${info.versionPath}/` },
    ],
    'media-types': [{ base: 'application/json', type: info.mediaType }],
  };
}

export function versionsResponse(info: VersionInfo, rootUrl: string): ApiResponse {
  return { status: 300, body: { versions: [versionEntry(info, rootUrl)] } };
}

export function versionResponse(info: VersionInfo, rootUrl: string): ApiResponse {
  return { status: 200, body: { versions: [versionEntry(info, rootUrl)] } };
}

/** The two unversioned routes of a service: `/` and `/v<N>/`. */
export function versionRoutes(info: VersionInfo): UnversionedRoute[] {
  return [
    { method: 'GET', path: '/', handler: async ({ rootUrl }) => versionsResponse(info, rootUrl) },
    {
      method: 'GET',
      path: `${info.versionPath}/`,
      handler: async ({ rootUrl, rawPath }) =>
        rawPath.endsWith('/') ? versionResponse(info, rootUrl) : { status: 302, headers: { Location: `${rootUrl}${info.versionPath}/` } },
    },
  ];
}

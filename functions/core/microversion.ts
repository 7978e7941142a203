/**
 * Microversion negotiation the way the OpenStack services do it.
 *
 * Cinder reads `OpenStack-API-Version: volume 3.27`; Nova reads `OpenStack-API-Version: compute 2.60`
 * or the legacy `X-OpenStack-Nova-API-Version: 2.60`; Manila reads `X-OpenStack-Manila-API-Version`.
 * No header means the minimum version; `latest` means the maximum; a well-formed version outside
 * the range is 406; a malformed one is 400. The chosen version is echoed in the response.
 */
import { BadRequest, NotAcceptable } from './errors.js';

export interface ServiceVersions {
  /** The service type in the `OpenStack-API-Version` header (`volume`, `compute`, `share`). */
  serviceType: string;
  major: number;
  minMinor: number;
  maxMinor: number;
  /** Service-specific header names, lower case, read when the generic header is absent. */
  legacyHeaders: string[];
  /** The header name the response echoes the version in, as upstream spells it. */
  responseHeaders: string[];
}

export const VOLUME_VERSIONS: ServiceVersions = {
  serviceType: 'volume',
  major: 3,
  minMinor: 0,
  maxMinor: 70,
  legacyHeaders: [],
  responseHeaders: ['OpenStack-API-Version'],
};

export const SHARE_VERSIONS: ServiceVersions = {
  serviceType: 'share',
  major: 2,
  minMinor: 0,
  maxMinor: 72,
  legacyHeaders: ['x-openstack-manila-api-version'],
  responseHeaders: ['X-OpenStack-Manila-API-Version'],
};

export const COMPUTE_VERSIONS: ServiceVersions = {
  serviceType: 'compute',
  major: 2,
  minMinor: 1,
  maxMinor: 93,
  legacyHeaders: ['x-openstack-nova-api-version'],
  responseHeaders: ['OpenStack-API-Version', 'X-OpenStack-Nova-API-Version'],
};

export class ApiVersion {
  constructor(
    readonly major: number,
    readonly minor: number,
  ) {}
  /** True when this version is at least `major.minor`. */
  atLeast(version: string): boolean {
    const [maj, min] = version.split('.').map(Number);
    return this.major > maj! || (this.major === maj && this.minor >= min!);
  }
  toString(): string {
    return `${this.major}.${this.minor}`;
  }
}

const VERSION_RE = /^(\d+)\.(\d+)$/;

/**
 * Picks the request's microversion from its (lower-cased) headers.
 * @throws BadRequest for a malformed version, NotAcceptable for one outside the range.
 */
export function negotiateVersion(headers: Record<string, string | undefined>, service: ServiceVersions): ApiVersion {
  let requested: string | undefined;
  const generic = headers['openstack-api-version'];
  if (generic) {
    // The header may name several services: "volume 3.27, compute 2.1".
    for (const part of generic.split(',')) {
      const [type, value] = part.trim().split(/\s+/);
      if (type?.toLowerCase() === service.serviceType && value) requested = value;
    }
  }
  if (requested === undefined) {
    for (const h of service.legacyHeaders) {
      if (headers[h]) {
        requested = headers[h]!.trim();
        break;
      }
    }
  }
  if (requested === undefined) return new ApiVersion(service.major, service.minMinor);
  if (requested.toLowerCase() === 'latest') return new ApiVersion(service.major, service.maxMinor);
  const m = VERSION_RE.exec(requested);
  if (!m) {
    throw new BadRequest(`API Version String ${requested} is of invalid format. Must be of format MajorNum.MinorNum.`);
  }
  const major = Number(m[1]);
  const minor = Number(m[2]);
  if (major !== service.major || minor < service.minMinor || minor > service.maxMinor) {
    throw new NotAcceptable(
      `Version ${requested} is not supported by the API. Minimum is ${service.major}.${service.minMinor} and maximum is ${service.major}.${service.maxMinor}.`,
    );
  }
  return new ApiVersion(major, minor);
}

/** Response headers that echo the negotiated version. */
export function versionHeaders(version: ApiVersion, service: ServiceVersions): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of service.responseHeaders) {
    out[h] = h === 'OpenStack-API-Version' ? `${service.serviceType} ${version}` : version.toString();
  }
  out['Vary'] = service.responseHeaders.join(', ');
  return out;
}

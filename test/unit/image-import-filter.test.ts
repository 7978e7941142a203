/** Glance's web-download filter (functions/images/import-filter.ts): schemes, ports, link-local hosts. */
import { describe, expect, test } from 'vitest';
import { allowedPorts, checkImportUri, DEFAULT_ALLOWED_PORTS } from '../../functions/images/import-filter.js';

const check = (uri: string, ports: number[] | 'any' = DEFAULT_ALLOWED_PORTS) => checkImportUri(new URL(uri), ports);

describe('web-download URI filter', () => {
  test('http and https on their default ports pass; other schemes do not', () => {
    expect(check('http://images.example.org/cirros.img')).toEqual({ ok: true });
    expect(check('https://images.example.org:443/cirros.img')).toEqual({ ok: true });
    for (const uri of ['file:///etc/passwd', 'ftp://images.example.org/x', 'gopher://x/']) expect(check(uri)).toMatchObject({ ok: false, reason: 'only http and https are allowed' });
  });

  test('ports: 80 and 443 unless the operator lists others, or any', () => {
    expect(check('http://10.0.0.5:8080/x')).toMatchObject({ ok: false, reason: expect.stringContaining('port 8080') });
    expect(check('https://example.org:80/x')).toEqual({ ok: true });
    expect(check('http://10.0.0.5:8080/x', [8080])).toEqual({ ok: true });
    expect(check('http://10.0.0.5:8080/x', 'any')).toEqual({ ok: true });
    expect(allowedPorts({})).toEqual([80, 443]);
    expect(allowedPorts({ FERRY_IMAGE_IMPORT_ALLOWED_PORTS: '80, 8080,nope,70000' })).toEqual([80, 8080]);
    expect(allowedPorts({ FERRY_IMAGE_IMPORT_ALLOWED_PORTS: 'any' })).toBe('any');
  });

  test('link-local hosts (cloud metadata services) are refused whatever the ports', () => {
    for (const uri of ['http://169.254.169.254/latest/meta-data/', 'http://[fe80::1]/x', 'http://[fd00:ec2::254]/latest/', 'http://[::ffff:169.254.169.254]/x']) {
      expect(check(uri, 'any')).toMatchObject({ ok: false, reason: expect.stringContaining('link-local') });
    }
    expect(check('http://169.255.0.1/x')).toEqual({ ok: true });
  });
});

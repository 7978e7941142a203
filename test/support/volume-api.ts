/**
 * The set-up most Cinder API test files share: a local stack for the file, the audit after each
 * test (DynamoDB and the backends agree, nothing leaked), and a JSON client for /volume/v3 with a
 * noauth token and a microversion.
 *   const stack = useAuditedStack();
 *   const api = volumeApi(stack, '3.0');
 *   const res = await api('GET', '/volumes', undefined, 'demo:demo');
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { runAudit } from '../../functions/audit/audit.js';
import { useLocalStack, type TestLocalStack } from './stack.js';

export const ADMIN = 'admin:admin';
export const DEMO = 'demo:demo';
export const OTHER = 'other:other';

export interface ApiAnswer {
  status: number;
  body: any;
}

/** The stack of this test file, started before its tests; `current()` is valid inside them. */
export function useAuditedStack(): { current(): TestLocalStack } {
  let stack: TestLocalStack | undefined;
  beforeAll(async () => {
    stack = await useLocalStack();
  }, 120_000);
  afterAll(async () => stack?.stop());
  afterEach(async () => {
    expect((await runAudit()).findings).toEqual([]);
  });
  return {
    current() {
      if (!stack) throw new Error('the local stack is not started: call current() inside a test');
      return stack;
    },
  };
}

/** A client for the stack's /volume/v3: method, path below it, body, token, microversion. */
export function volumeApi(stack: { current(): TestLocalStack }, defaultVersion: string) {
  return async (method: string, path: string, body?: unknown, token: string = DEMO, version = defaultVersion): Promise<ApiAnswer> => {
    const res = await fetch(`${stack.current().url}/volume/v3${path}`, {
      method,
      headers: {
        'X-Auth-Token': token,
        'OpenStack-API-Version': `volume ${version}`,
        Accept: 'application/json',
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
}

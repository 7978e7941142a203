/**
 * fast-check generators of hostile request bodies and query strings for the REST API fuzz tests:
 * arbitrary JSON, near-valid bodies (the right wrapper key, fields of wrong types, out-of-range
 * numbers, type-confusing strings, keys that collide with Object.prototype, very long and unicode
 * strings, extra keys), malformed JSON text and wrong content types.
 *
 * Bodies may hold placeholders (`$VOLUME`, `$ATTACHMENT`, ...) as whole string values; the test
 * replaces them with the ids of its current fixtures just before sending, so a generated body can
 * name a real resource although fixtures are replaced while the property runs.
 */
import fc from 'fast-check';

/** Keys that name Object.prototype members, or that DynamoDB expressions and paths might mistake. */
export const TRICKY_KEYS = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', '', ' ', 'a.b', '#k0', ':v0', 'x'.repeat(300), '\u0000', 'ключ', '🔑'];

/** Strings that look like something else. */
export const TRICKY_STRINGS = [
  'True', 'False', 'true', 'false', 'yes', 'no', 'None', 'null', 'NaN', 'Infinity', '-Infinity', '1e309', '-1', '0', '1', '01', '+1', '1.5', '0x10', ' 1 ',
  '١', '²', '', ' ', '\u0000', '\n', '%00', '../../etc', '{}', '[]', '__proto__', 'constructor', "{'a': 'b'}", '"', "'", '\\',
  'x'.repeat(255), 'x'.repeat(256), 'é'.repeat(256), '🦀'.repeat(200), 'x'.repeat(5000),
];

/** Numbers JSON can carry and a JS or DynamoDB consumer may trip over. */
export const TRICKY_NUMBERS = [0, -0, -1, 1.5, 2147483647, 2147483648, -2147483649, 2 ** 53, 2 ** 53 + 2, 1e21, 1e38, 1e126, 1e308, -1e308, 5e-324, 1e-130, 123456789012345678901234567890123456789];

export const weirdValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(...TRICKY_STRINGS),
  fc.constantFrom<unknown>(...TRICKY_NUMBERS),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
  fc.constant([]),
  fc.constant({}),
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
);

/** The valid-only variant of an arbitrary made by field() or struct(), kept on the arbitrary itself. */
const VALID = Symbol('valid');
type Tagged = fc.Arbitrary<unknown> & { [VALID]?: fc.Arbitrary<unknown> };
export const validOf = (a: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> => (a as Tagged)[VALID] ?? a;
function tag(a: fc.Arbitrary<unknown>, valid: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  (a as Tagged)[VALID] = valid;
  return a;
}

/** Mostly the valid shape, often something else. */
export function field<T>(valid: fc.Arbitrary<T>): fc.Arbitrary<unknown> {
  return tag(fc.oneof({ weight: 3, arbitrary: valid as fc.Arbitrary<unknown> }, { weight: 2, arbitrary: weirdValue }), validOf(valid));
}

/** Valid values, or (as often) invalid ones of the right type; the valid-only variant is `valid`. */
export function orInvalid<T>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return tag(field(fc.oneof(valid as fc.Arbitrary<unknown>, invalid)), validOf(valid));
}

/** Sets keys as own enumerable properties, so `__proto__` becomes a JSON key instead of the prototype. */
export function withOwnKeys(base: Record<string, unknown>, extra: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of [...Object.entries(base), ...Object.entries(extra)]) {
    Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

const extraKeys: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({}) },
  {
    weight: 2,
    arbitrary: fc
      .array(fc.tuple(fc.oneof(fc.constantFrom(...TRICKY_KEYS), fc.string({ maxLength: 12 })), weirdValue), { maxLength: 2 })
      .map((pairs) => withOwnKeys({}, Object.fromEntries(pairs.map(([k, v]) => [k, v])))),
  },
);

/**
 * An object with any subset of `fields` (each mostly valid) plus, sometimes, unexpected keys; or,
 * a third of the time, a valid one: every field's valid variant, `required` ones always present.
 */
export function struct(fields: Record<string, fc.Arbitrary<unknown>>, opts: { required?: string[] } = {}): fc.Arbitrary<Record<string, unknown>> {
  const valid = fc.record(Object.fromEntries(Object.entries(fields).map(([k, a]) => [k, validOf(a)])), { requiredKeys: opts.required ?? [] }) as fc.Arbitrary<Record<string, unknown>>;
  const fuzzy = fc.tuple(fc.record(fields, { requiredKeys: [] }), extraKeys).map(([base, extra]) => withOwnKeys(base as Record<string, unknown>, extra));
  return tag(fc.oneof({ weight: 2, arbitrary: fuzzy }, { weight: 1, arbitrary: valid }), valid) as fc.Arbitrary<Record<string, unknown>>;
}

/** `{"<key>": inner}` mostly; sometimes the wrapper holds a wrong value, or has company. */
export function wrap(key: string, inner: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 8, arbitrary: inner.map((i) => withOwnKeys({}, { [key]: i })) },
    { weight: 2, arbitrary: fc.tuple(inner, extraKeys).map(([i, extra]) => withOwnKeys({ [key]: i }, extra)) },
    { weight: 1, arbitrary: weirdValue.map((w) => withOwnKeys({}, { [key]: w })) },
  );
}

/** Strings / string maps of bounded size that are valid metadata or extra specs (and big ones). */
export const smallStringMap = fc.dictionary(fc.string({ minLength: 1, maxLength: 12 }), fc.string({ maxLength: 12 }), { maxKeys: 4 });
export const specKey = fc.constantFrom('k1', 'k2', 'multiattach', 'volume_backend_name', 'RESKEY:availability_zones', 'a b', 'x.y', 'cap:thin', 'bad!key', 'ключ');
export const specMap = fc.oneof(
  fc.dictionary(specKey, fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('<is> True', '<is> False')), { maxKeys: 4 }),
  fc.dictionary(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), { maxKeys: 3 }),
);
/** Many entries at once: limits of item size and expression length are reached here, not with 3 keys. */
export const bigStringMap = fc
  .tuple(fc.integer({ min: 100, max: 1200 }), fc.integer({ min: 1, max: 255 }))
  .map(([n, len]) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`key${String(i).padStart(4, '0')}${'k'.repeat(Math.max(0, len - 7))}`, 'v'.repeat(len)])));

/** An os-brick connector, mostly right, with arbitrary extra members (any JSON, numbers included). */
export const connector = fc.tuple(
  struct({
    host: field(fc.constantFrom('cmp1', 'cmp2', 'cmp-long-' + 'h'.repeat(200))),
    initiator: field(fc.constant('iqn.2004-10.org:cmp1')),
    ip: field(fc.constantFrom('10.0.0.5', '::1')),
    platform: field(fc.constant('x86_64')),
    os_type: field(fc.constant('linux2')),
    multipath: field(fc.boolean()),
    mountpoint: field(fc.constantFrom('/dev/vdb', null)),
    mode: field(fc.constantFrom('rw', 'ro')),
  }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 2 }),
).map(([c, extra]) => withOwnKeys(c, extra));

/** A body as sent: JSON text of a value, or raw text; with its content type. */
export interface BodyCase {
  /** The value to JSON.stringify, or undefined for a raw text body. */
  value?: unknown;
  raw?: string;
  contentType?: string;
  base64?: boolean;
}

const malformedText: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom('{', '}', '{"volume":', '{"volume": {"size": 1,}}', "{'volume': {}}", 'null', 'NaN', 'undefined', '\uFEFF{"volume": {"size": 1}}', '{"a":1}{"b":2}', '[', '"', ' ', '\u0000', 'x=1&y=2', '<volume size="1"/>'),
  fc.string({ maxLength: 60 }),
  fc.jsonValue({ maxDepth: 3 }).chain((v) => {
    const text = JSON.stringify(v) ?? 'null';
    return fc.integer({ min: 0, max: Math.max(0, text.length - 1) }).map((n) => text.slice(0, n));
  }),
);

const contentType = fc.constantFrom<string | undefined>(undefined, undefined, undefined, 'text/plain', 'application/xml', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json; charset=latin1');

/** What an endpoint's fuzz run sends: the structured bodies most of the time, then any JSON, malformed text, base64. */
export function bodyCases(structured: fc.Arbitrary<unknown>): fc.Arbitrary<BodyCase> {
  return fc.oneof(
    { weight: 10, arbitrary: fc.tuple(structured, contentType).map(([value, ct]): BodyCase => ({ value, contentType: ct })) },
    { weight: 3, arbitrary: fc.jsonValue().map((value): BodyCase => ({ value })) },
    { weight: 2, arbitrary: fc.tuple(malformedText, contentType).map(([raw, ct]): BodyCase => ({ raw, contentType: ct })) },
    { weight: 1, arbitrary: fc.tuple(structured, fc.boolean()).map(([value, garble]): BodyCase => ({ raw: garble ? '!!notbase64' : Buffer.from(JSON.stringify(value) ?? '').toString('base64'), base64: true })) },
    { weight: 1, arbitrary: fc.constant<BodyCase>({}) },
  );
}

/** Query strings: known parameter names with tricky values, raw garbage, repeated keys. */
export function queryStrings(names: string[], values: fc.Arbitrary<string>, prefix: fc.Arbitrary<[string, string][]> = fc.constant([])): fc.Arbitrary<string> {
  const name = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...names) }, { weight: 1, arbitrary: fc.constantFrom(...TRICKY_KEYS) }, { weight: 1, arbitrary: fc.string({ maxLength: 10 }) });
  const value = fc.oneof({ weight: 4, arbitrary: values }, { weight: 2, arbitrary: fc.constantFrom(...TRICKY_STRINGS) }, { weight: 1, arbitrary: fc.string({ maxLength: 20 }) });
  return fc.oneof(
    { weight: 8, arbitrary: fc.tuple(prefix, fc.array(fc.tuple(name, value), { maxLength: 4 })).map(([first, pairs]) => new URLSearchParams([...first, ...pairs]).toString()) },
    { weight: 1, arbitrary: fc.string({ maxLength: 40 }) },
    {
      weight: 2,
      arbitrary: fc.constantFrom('%', '%zz', '&&&', '=', 'limit', 'limit=%FF', 'a=1&a=2&a=3', 'sort=id:asc&sort_key=id', 'marker=&limit=', 'sort=__proto__', 'sort_key=__proto__&sort_dir=asc', 'sort=constructor:asc', 'sort_key=toString', '__proto__=1', 'constructor=x'),
    },
  );
}

/** A fuzzed request as sent, for failure messages. */
export interface SentRequest {
  method: string;
  path: string;
  query?: string;
  caller: string;
  version: string;
  contentType?: string;
  base64?: boolean;
  body?: string;
}

/** One line describing a sent request (the body cut at 800 characters). */
export function describeRequest(sent: SentRequest): string {
  const b = sent.body === undefined ? '' : ` body=${sent.body.length > 800 ? sent.body.slice(0, 800) + `... (${sent.body.length} chars)` : sent.body}`;
  return `${sent.method} ${sent.path}${sent.query ? '?' + sent.query : ''} as ${sent.caller} at ${sent.version}${sent.contentType ? ` content-type=${sent.contentType}` : ''}${sent.base64 ? ' base64' : ''}${b}`;
}

/** An upstream fault body: `{"<fault>": {"code": <status>, "message": "..."}}`. */
export function isFaultBody(text: string, status: number): boolean {
  try {
    const parsed = JSON.parse(text) as Record<string, { code?: unknown; message?: unknown }>;
    const keys = Object.keys(parsed);
    return keys.length === 1 && parsed[keys[0]!]!.code === status && typeof parsed[keys[0]!]!.message === 'string';
  } catch {
    return false;
  }
}

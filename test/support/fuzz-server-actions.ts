/**
 * The server actions test/integration/fuzz-servers.test.ts fuzzes, each with its argument's valid
 * and near-valid values at a microversion (Nova's schemas in N/api/openstack/compute/schemas/),
 * who may send it, and the state the server must be in for a valid one to succeed.
 */
import fc from 'fast-check';
import { SANDBOX_IMAGES } from '../../functions/servers/images.js';
import { ADMIN, DEMO, type Caller } from './events.js';
import { SANDBOX_NETWORK } from '../../functions/compute/seed.js';
import { bigStringMap, field, orInvalid, smallStringMap, struct, weirdValue, wrap } from './fuzz-arbitraries.js';

/** The state a target wants the server in before each request (so its valid bodies can succeed). */
export type Desired = 'ACTIVE' | 'SHUTOFF' | 'VERIFY_RESIZE' | 'SHELVED' | 'SHELVED_OFFLOADED' | 'PAUSED' | 'SUSPENDED';

const IMAGE = SANDBOX_IMAGES.cirrosTiny.id;

export const owners = fc.constantFrom(DEMO, DEMO, ADMIN);
export const admins = fc.constantFrom(ADMIN, ADMIN, ADMIN, DEMO);
export const nullArg = field(fc.constant(null));
export const BAD_HOSTS = fc.constantFrom('cmp3', 'cmp4', 'nohost', 'controller', '', ' cmp2', 'CMP2', 'cmp2#pool', 'a/b', '__proto__', 'constructor', 'x'.repeat(256), 'x'.repeat(3000), 'хост');
export const boolish = fc.constantFrom<unknown>(true, false, 'True', 'false', '1', '0', 'on', 'NO');
export const notBoolish = fc.constantFrom<unknown>('maybe', 2, '', 'auto ', [], {});

const minor = (v: string) => Number(v.split('.')[1]);
/** Whether microversion `v` is at least `x` (both 2.N). */
export const atLeast = (v: string, x: string) => minor(v) >= minor(x);
/** Mostly `valid` (what the microversion's schema accepts), else the near-valid `fuzzy`. */
export const validOr = (valid: fc.Arbitrary<unknown>, fuzzy: fc.Arbitrary<unknown>) => fc.oneof({ weight: 1, arbitrary: valid }, { weight: 1, arbitrary: fuzzy });
const SAME_CELL = fc.constantFrom('cmp1', 'cmp2');

export interface ActionSpec {
  /** The action's argument at a microversion: valid ones and near-valid ones. */
  args: (version: string) => fc.Arbitrary<unknown>;
  who: fc.Arbitrary<Caller>;
  desired?: Desired;
  numRuns: number;
  no2xx?: boolean;
  env?: Record<string, string>;
}

const liveMigrateFuzzy = struct({
  host: orInvalid(fc.constantFrom(null, 'cmp1', 'cmp2'), BAD_HOSTS),
  block_migration: orInvalid(fc.constantFrom<unknown>(false, 'auto', 'False', '0', true), notBoolish),
  disk_over_commit: orInvalid(boolish, notBoolish),
  force: orInvalid(boolish, notBoolish),
});
const evacuateFuzzy = struct({
  host: orInvalid(SAME_CELL, BAD_HOSTS),
  adminPass: field(fc.string({ maxLength: 12 })),
  onSharedStorage: orInvalid(fc.boolean(), notBoolish),
  force: orInvalid(fc.boolean(), notBoolish),
});
const unshelveFuzzy = struct({ availability_zone: orInvalid(fc.constantFrom('nova', null), fc.constantFrom('other', '', 'NOVA')), host: orInvalid(SAME_CELL, BAD_HOSTS) });

const rebuildFuzzy = struct(
  {
    imageRef: orInvalid(fc.constantFrom(IMAGE, SANDBOX_IMAGES.ferryTiny.id), fc.constantFrom('nonexistent', '00000000-0000-0000-0000-000000000000', '', 'x'.repeat(3000), 5)),
    name: orInvalid(fc.constantFrom('rebuilt'), fc.constantFrom('', ' x', '\u0007')),
    metadata: orInvalid(smallStringMap, bigStringMap),
    adminPass: field(fc.string({ maxLength: 12 })),
  },
  { required: ['imageRef'] },
);

export const ACTIONS: Record<string, ActionSpec> = {
  'os-stop': { args: () => nullArg, who: owners, numRuns: 12 },
  'os-start': { args: () => nullArg, who: owners, desired: 'SHUTOFF', numRuns: 12 },
  reboot: { args: () => struct({ type: orInvalid(fc.constantFrom('HARD', 'SOFT', 'hard', 'Soft'), fc.constantFrom('WARM', '', 'hArd', 1)) }, { required: ['type'] }), who: owners, numRuns: 16 },
  'os-migrateLive': {
    args: (v) =>
      validOr(
        fc.record(
          {
            host: fc.constantFrom(null, 'cmp1', 'cmp2'),
            block_migration: atLeast(v, '2.25') ? fc.constantFrom<unknown>('auto', false, 'False') : fc.constantFrom<unknown>(false, 'False', '0'),
            ...(atLeast(v, '2.25') ? {} : { disk_over_commit: boolish }),
            ...(atLeast(v, '2.30') && !atLeast(v, '2.68') ? { force: fc.constantFrom<unknown>(false, 'no', true) } : {}),
          },
          { requiredKeys: atLeast(v, '2.25') ? ['host', 'block_migration'] : ['host', 'block_migration', 'disk_over_commit'] },
        ),
        liveMigrateFuzzy,
      ),
    who: admins,
    numRuns: 20,
  },
  migrate: { args: (v) => validOr(fc.oneof(fc.constant(null), atLeast(v, '2.56') ? fc.record({ host: fc.constantFrom(null, 'cmp1', 'cmp2') }, { requiredKeys: [] }) : weirdValue), struct({ host: orInvalid(fc.constantFrom(null, 'cmp1', 'cmp2'), BAD_HOSTS) })), who: admins, numRuns: 12 },
  resize: {
    args: () =>
      struct(
        {
          flavorRef: orInvalid(fc.constantFrom<unknown>('1', '3', 3, '2'), fc.constantFrom<unknown>('5', '0', 'nope', '', -1, 1.5, ' 3', 'x'.repeat(3000), '__proto__')),
          'OS-DCF:diskConfig': orInvalid(fc.constantFrom('AUTO', 'MANUAL'), fc.constantFrom('auto', 'NONE')),
        },
        { required: ['flavorRef'] },
      ),
    who: owners,
    numRuns: 16,
  },
  confirmResize: { args: () => nullArg, who: owners, desired: 'VERIFY_RESIZE', numRuns: 10 },
  revertResize: { args: () => nullArg, who: owners, desired: 'VERIFY_RESIZE', numRuns: 10 },
  evacuate: {
    args: (v) =>
      validOr(
        fc.record(
          {
            host: SAME_CELL,
            adminPass: fc.string({ maxLength: 12 }),
            ...(atLeast(v, '2.14') ? {} : { onSharedStorage: fc.boolean() }),
            ...(atLeast(v, '2.29') && !atLeast(v, '2.68') ? { force: fc.boolean() } : {}),
          },
          { requiredKeys: atLeast(v, '2.14') ? [] : ['onSharedStorage'] },
        ),
        evacuateFuzzy,
      ),
    who: admins,
    numRuns: 20,
    // Evacuate needs the server's host down; the fixture's never is (its refusals are what is fuzzed).
    no2xx: true,
  },
  shelve: { args: () => nullArg, who: owners, numRuns: 4 },
  // Nova's schemas are `{}` for these: any value is accepted.
  pause: { args: () => nullArg, who: owners, numRuns: 6 },
  unpause: { args: () => nullArg, who: owners, desired: 'PAUSED', numRuns: 6 },
  suspend: { args: () => nullArg, who: owners, numRuns: 6 },
  resume: { args: () => nullArg, who: owners, desired: 'SUSPENDED', numRuns: 6 },
  lock: { args: (v) => (atLeast(v, '2.73') ? struct({ locked_reason: orInvalid(fc.constantFrom('maintenance', 'r'), fc.constantFrom('', 'x'.repeat(256), 5)) }) : nullArg), who: owners, numRuns: 8 },
  unlock: { args: () => nullArg, who: owners, numRuns: 4 },
  rebuild: { args: () => rebuildFuzzy, who: owners, numRuns: 8 },
  // shelveOffload needs SHELVED, which only a non-zero [DEFAULT]shelved_offload_time leaves.
  shelveOffload: { args: () => nullArg, who: fc.constantFrom(ADMIN, ADMIN, ADMIN, ADMIN, DEMO), desired: 'SHELVED', numRuns: 5, env: { FERRY_SHELVED_OFFLOAD_TIME: '-1' } },
  unshelve: {
    args: (v) =>
      validOr(
        !atLeast(v, '2.77')
          ? fc.oneof(fc.constant(null), weirdValue)
          : atLeast(v, '2.91')
            ? fc.oneof(fc.constant(null), fc.record({ availability_zone: fc.constantFrom('nova', null), host: SAME_CELL }, { requiredKeys: [] }).filter((o) => Object.keys(o).length > 0))
            : fc.oneof(fc.constant(null), fc.constant({ availability_zone: 'nova' })),
        fc.oneof(nullArg, unshelveFuzzy),
      ),
    who: owners,
    desired: 'SHELVED_OFFLOADED',
    numRuns: 5,
  },
};

const volumeRef = orInvalid(fc.constant('$AVAILABLE'), fc.constantFrom('$ATTACHED', '$SERVER', '00000000-0000-0000-0000-000000000000', 'not-a-uuid', '', 'x'.repeat(3000)));

/** POST /servers/{id}/os-volume_attachments (schemas/volumes.py create_volume_attachment). */
export const volumeAttachBody = wrap(
  'volumeAttachment',
  struct(
    {
      volumeId: volumeRef,
      device: orInvalid(fc.constantFrom(null, '/dev/vdc'), fc.constantFrom('/dev/vdb', '/dev/vda', 'vdz', '', '/dev/../etc')),
      tag: field(fc.string({ maxLength: 8 })),
      delete_on_termination: orInvalid(fc.boolean(), notBoolish),
    },
    { required: ['volumeId'] },
  ),
);

/** PUT /servers/{id}/os-volume_attachments/{volume}: a swap before 2.85, an update from it. */
export const volumeSwapBody = (v: string) =>
  wrap(
    'volumeAttachment',
    validOr(
      // Before 2.85 only a swap (volumeId); from 2.85 also the attachment's own fields unchanged, and delete_on_termination.
      atLeast(v, '2.85')
        ? fc.record(
            {
              volumeId: fc.constantFrom('$AVAILABLE', '$ATTACHED', '$ATTACHED'),
              device: fc.constant('/dev/vdb'),
              serverId: fc.constant('$SERVER'),
              id: fc.constant('$ATTACHED'),
              tag: fc.constant(null),
              delete_on_termination: fc.boolean(),
            },
            { requiredKeys: ['volumeId'] },
          )
        : fc.constant({ volumeId: '$AVAILABLE' }),
      struct(
        {
          volumeId: orInvalid(fc.constantFrom('$AVAILABLE', '$ATTACHED'), fc.constantFrom('$SERVER', '00000000-0000-0000-0000-000000000000', 'not-a-uuid')),
          device: orInvalid(fc.constant('/dev/vdb'), fc.constantFrom('/dev/vdc', null)),
          tag: field(fc.constant(null)),
          serverId: orInvalid(fc.constant('$SERVER'), fc.constant('00000000-0000-0000-0000-000000000000')),
          id: orInvalid(fc.constant('$ATTACHED'), fc.constant('$AVAILABLE')),
          delete_on_termination: orInvalid(fc.boolean(), notBoolish),
        },
        { required: ['volumeId'] },
      ),
    ),
  );

/** POST /servers (schemas/servers.py base_create and its microversion variants). */
export const serverCreateBody = (v: string) =>
  wrap(
    'server',
    struct(
      {
        // Nova's name format: printable, no leading or trailing whitespace.
        name: orInvalid(fc.constantFrom('fz', 'vm-1', 'a b', 'имя'), fc.constantFrom('', 'x'.repeat(256), '\u0000\u0007', ' lead', 'trail ', 'a\tb', 'x\u2028y', '\u{1F600}')),
        flavorRef: orInvalid(fc.constantFrom<unknown>('1', '3', 1), fc.constantFrom<unknown>('5', 'nope', '', 'x'.repeat(3000), '__proto__', 1.5, -1)),
        imageRef: orInvalid(fc.constant(IMAGE), fc.constantFrom('nonexistent', '00000000-0000-0000-0000-000000000000', '', 'x'.repeat(3000))),
        networks: orInvalid(fc.constantFrom<unknown>('auto', 'none', [{ uuid: SANDBOX_NETWORK.id }]), fc.constantFrom<unknown>('some', [{ uuid: 'nope' }], [{}], [null], [{ uuid: 5 }], [{ port: 'x' }])),
        block_device_mapping_v2: orInvalid(
          fc.constant([{ boot_index: 0, uuid: '$AVAILABLE', source_type: 'volume', destination_type: 'volume' }]),
          fc.constantFrom<unknown>(
            [{ boot_index: 0, uuid: '$ATTACHED', source_type: 'volume', destination_type: 'volume' }],
            [{ boot_index: 0, uuid: '$AVAILABLE', source_type: 'image', destination_type: 'local' }],
            [{ boot_index: 'x', uuid: '$AVAILABLE' }],
            [{ boot_index: 1.5, uuid: '$AVAILABLE' }],
            [{ uuid: 'not-a-uuid' }],
            [{ uuid: '$AVAILABLE' }, { uuid: '$AVAILABLE' }],
            [null],
            {},
          ),
        ),
        availability_zone: orInvalid(fc.constant('nova'), fc.constantFrom('other', '', 'nova:cmp1')),
        // A 2.74 property: before it, only the fuzzy variants' extra keys send it (refused, additionalProperties).
        ...(atLeast(v, '2.74') ? { host: orInvalid(fc.constantFrom('cmp1', 'cmp3'), BAD_HOSTS) } : {}),
        metadata: orInvalid(smallStringMap, bigStringMap),
        key_name: field(fc.string({ maxLength: 8 })),
        // positive_integer (an integer or a string of digits, at least 1); more than one boots several servers.
        min_count: orInvalid(fc.constantFrom<unknown>(1, '1'), fc.constantFrom<unknown>(0, '0', -1, 1.5, '', 'x', '1.0', 9223372036854775807, '9223372036854775808', 11, 3, [1])),
        max_count: orInvalid(fc.constantFrom<unknown>(1, '1', 2), fc.constantFrom<unknown>(0, 'x', 1.5, 2 ** 63, null)),
        return_reservation_id: orInvalid(boolish, notBoolish),
      },
      { required: ['name', 'flavorRef', 'imageRef'] },
    ),
  );

/**
 * `ferry watch [OPERATION] [--interval SECONDS] [--plain]`: follows one operation live until it
 * ends. On a terminal one line is redrawn in place (bar, percent, amount, rate, ETA, step);
 * otherwise (a pipe, a log, --plain) a plain line is printed each time the percent or the step
 * changes. The rate comes from the samples it reads (the last 10 s), else the record's timestamps.
 *
 * Without OPERATION it follows the one operation in flight (and says which are when there are
 * several). Exit 0 when the operation succeeded (or a phase ended and it waits for the operator:
 * migration-complete, resize-confirm), 1 when it failed or was cancelled (the reason printed), 2
 * when it could not run (no such operation, no stack).
 */
import { parseArgs } from 'node:util';
import type { OperationView } from '../functions/ops/model.js';
import { rateFromSamples, etaSeconds, type Sample } from '../functions/ops/rate.js';
import { CannotRun, cannotRead, requireStack, UsageError, type Io } from './cli.js';
import { formatDuration, progressLine } from './ops-format.js';

export const DEFAULT_INTERVAL_SECONDS = 1;

const errorName = (e: unknown) => (e as { name?: string } | undefined)?.name;

/** The operation to follow: the one named, or the only one in flight. */
async function pick(ref: string | undefined): Promise<string> {
  if (ref !== undefined) return ref;
  const { listOperations, DEFAULT_SINCE_HOURS } = await import('../functions/ops/read.js');
  const snap = await listOperations({ since: new Date(Date.now() - DEFAULT_SINCE_HOURS * 3_600_000) });
  const running = snap.inFlight.filter((v) => v.status === 'running');
  if (running.length === 1) return running[0]!.ref;
  if (running.length === 0) throw new CannotRun('no operation is running: name one (`ferry ops` lists what ran lately)');
  throw new UsageError(`${running.length} operations are running; name one: ${running.map((v) => v.ref).join(', ')}`);
}

export async function watch(args: string[], io: Io): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: { interval: { type: 'string' }, plain: { type: 'boolean', default: false } },
  });
  if (positionals.length > 1) throw new UsageError('watch takes one OPERATION');
  const interval = values.interval === undefined ? DEFAULT_INTERVAL_SECONDS : Number(values.interval);
  if (!(Number.isFinite(interval) && interval > 0)) throw new UsageError(`--interval must be a number of seconds, not "${values.interval}"`);
  requireStack();
  const { getOperation } = await import('../functions/ops/read.js');
  const { parseRef } = await import('../functions/ops/model.js');
  let ref: string;
  try {
    ref = await pick(positionals[0]);
    parseRef(ref);
  } catch (e) {
    if (e instanceof UsageError || e instanceof CannotRun) throw e;
    if (errorName(e) === 'BadRequest') throw new UsageError((e as Error).message);
    throw cannotRead(e, 'ferry watch');
  }
  const read = async (): Promise<OperationView> => {
    try {
      return await getOperation(ref);
    } catch (e) {
      if (errorName(e) === 'NotFound') throw new CannotRun((e as Error).message);
      throw cannotRead(e, 'ferry watch');
    }
  };

  const tty = io.isTTY === true && io.write !== undefined && !values.plain;
  const columns = io.columns && io.columns > 20 ? io.columns : 120;
  let v = await read();
  io.out(`${v.kind} ${v.ref}: ${v.resource}`);
  const samples: Sample[] = [];
  let samplesOf: string | undefined;
  let lastPlain = '';
  for (let tick = 0; ; tick++) {
    const p = v.progress;
    // Another total or unit (a copy run again, the next phase), or a step back, starts the samples over.
    const of = p ? `${p.total} ${p.unit}` : undefined;
    if (p && (of !== samplesOf || (samples.length > 0 && samples[samples.length - 1]!.done > p.done))) samples.length = 0;
    samplesOf = of;
    if (p) samples.push({ at: Date.now(), done: p.done });
    const rate = rateFromSamples(samples) ?? v.rate;
    const eta = p ? etaSeconds(p.done, p.total, rate) : null;
    const line = progressLine(v, { rate, etaSeconds: eta, tick });
    if (tty) io.write!(`\r\x1b[2K${line.slice(0, columns - 1)}`);
    else {
      // Plain lines: a new one when the percent or the step moves, not at every read.
      const key = `${v.fraction === null ? '?' : Math.floor(v.fraction * 100)} ${v.step} ${v.status}`;
      if (key !== lastPlain) io.out(line);
      lastPlain = key;
    }
    if (v.status !== 'running') break;
    await new Promise((r) => setTimeout(r, interval * 1000));
    v = await read();
  }
  if (tty) io.write!('\n');
  const took = v.endedAt ? ` in ${formatDuration((Date.parse(v.endedAt) - Date.parse(v.startedAt)) / 1000)}` : '';
  switch (v.status) {
    case 'succeeded':
      io.out(`succeeded${took}: ${v.kind} ${v.ref}`);
      return 0;
    case 'waiting':
      io.out(`${v.step}: ${v.kind} ${v.ref}`);
      return 0;
    case 'cancelled':
      io.out(`cancelled${took}: ${v.reason ?? v.step}`);
      return 1;
    default:
      io.out(`failed${took}: ${v.reason ?? 'no reason was recorded'}`);
      return 1;
  }
}

/**
 * oslo's `strutils.bool_from_string(strict=True)`, which every upstream API applies to boolean
 * parameters: JSON booleans and the strings below (case and surrounding blanks ignored).
 * Returns undefined for anything else; each API words its own 400.
 */
const TRUE_STRINGS = ['1', 't', 'true', 'on', 'y', 'yes'];
const FALSE_STRINGS = ['0', 'f', 'false', 'off', 'n', 'no'];

export function boolFromString(v: unknown): boolean | undefined {
  if (typeof v === 'boolean') return v;
  if (typeof v !== 'string') return undefined;
  const s = v.trim().toLowerCase();
  if (TRUE_STRINGS.includes(s)) return true;
  if (FALSE_STRINGS.includes(s)) return false;
  return undefined;
}

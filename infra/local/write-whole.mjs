/**
 * One JSON record written whole or not at all, for the plain .mjs modules `npm start` loads before
 * the bundle (system-check.mjs's stamp, start-bundle.mjs's record): each writer writes its own
 * temporary (named by its pid) and renames it over the file, so a concurrent start or a crash
 * leaves the old record or the new one, never a torn one. Plain JavaScript: loadable without tsx.
 */
import { renameSync, writeFileSync } from 'node:fs';

/**
 * Replaces `file` with `value` as JSON, through `<file>.<pid>.tmp` in the same directory (a rename
 * is atomic only within one file system). The directory must exist.
 * @param {string} file
 * @param {unknown} value
 */
export function writeJsonWhole(file, value) {
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, JSON.stringify(value));
  renameSync(temp, file);
}

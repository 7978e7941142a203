/**
 * Looks a request-supplied key up in a table of known names. A plain `table[key]` also finds
 * what every object inherits (`constructor`, `toString`, `__proto__`), so a client could name an
 * "action" or "sort key" that is really a built-in function: own keys only.
 */
export function own<T>(table: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(table, key) ? table[key] : undefined;
}

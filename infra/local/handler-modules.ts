/**
 * The functions' handler modules as the start bundle holds them (infra/local/start-bundle.mjs).
 *
 * Run from TypeScript (tsx, vitest), a handler is imported from its entry's path on first use
 * (http.ts loadHandler). Run from the start bundle, Node cannot import a `.ts` path, and a module
 * loaded beside the bundle would be a second copy of the core with its own clients and state; so
 * the bundle's entry registers, before anything else runs, a loader per entry that imports the
 * bundle's own chunk of that module (loaded on first use, as before).
 */
export type HandlerModuleLoader = () => Promise<Record<string, unknown>>;

const bundled = new Map<string, HandlerModuleLoader>();

/** Called once by the bundle's entry: entry path (from the repository root) -> its chunk. */
export function registerBundledHandlerModules(loaders: Record<string, HandlerModuleLoader>): void {
  for (const [entry, load] of Object.entries(loaders)) bundled.set(entry, load);
}

/** The bundle's loader of `entry`, when this process runs from the start bundle and it holds that entry. */
export function bundledHandlerModule(entry: string): HandlerModuleLoader | undefined {
  return bundled.get(entry);
}

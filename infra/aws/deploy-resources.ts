/**
 * Which function of the wiring a deploy-time custom resource runs: the one of kind `deploy` whose
 * `deployResource` names it (functions/wiring.ts). Used for the inventory (inventory-resource.ts)
 * and the identity bootstrap (identity-bootstrap.ts).
 */
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import type { FunctionWiring } from '../../functions/wiring.js';

export interface DeployScope {
  readonly wiring: { readonly functions: readonly FunctionWiring[] };
  readonly functions: ReadonlyMap<string, IFunction>;
}

/**
 * The function, or undefined when the wiring has none (a test's fixture) and nothing `requiredBy` it.
 * @throws when there is more than one (synth cannot choose), or none and `requiredBy` names what needs it
 */
export function deployFunction(scope: DeployScope, resource: NonNullable<FunctionWiring['deployResource']>, requiredBy?: string): IFunction | undefined {
  const found = scope.wiring.functions.filter((f) => f.kind === 'deploy' && f.deployResource === resource);
  if (found.length > 1) throw new Error(`functions/wiring.ts: ${found.length} functions of kind 'deploy' have deployResource '${resource}'; keep exactly one.`);
  if (!found[0] && requiredBy) throw new Error(`functions/wiring.ts: ${requiredBy} needs a function of kind 'deploy' with deployResource '${resource}', and there is none.`);
  return found[0] && scope.functions.get(found[0].name);
}

/**
 * The inventory applied at deploy time: `cdk deploy -c inventory=FILE` puts the validated document
 * in a CloudFormation custom resource, and this handler (the Provider framework's onEvent) applies
 * it on create and update, so a fresh deploy is usable at once. A refusal (removing what is in use)
 * fails the deploy with the plan as its reason; CloudFormation rolls the stack update back and
 * nothing of the apply is written (a refused apply writes nothing). Deleting the stack leaves the
 * data: the tables are retained or deleted by their own removal policy.
 */
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';

/** The custom resource's property holding the inventory as JSON. */
export const INVENTORY_PROPERTY = 'Inventory';
const PHYSICAL_ID = 'ferry-inventory';

export async function handler(event: CloudFormationCustomResourceEvent): Promise<{ PhysicalResourceId: string; Data?: Record<string, string> }> {
  if (event.RequestType === 'Delete') return { PhysicalResourceId: event.PhysicalResourceId };
  // Loaded on the first Create or Update, not at import: the inventory's schema (zod) and every
  // capability's writes are most of this bundle, and a Delete needs none of them.
  const [{ applyInventory }, { formatPlan }] = await Promise.all([import('./apply.js'), import('./plan.js')]);
  const document: unknown = JSON.parse(String(event.ResourceProperties[INVENTORY_PROPERTY]));
  const result = await applyInventory(document, { target: 'aws' });
  const plan = formatPlan(result.plan);
  console.log(JSON.stringify({ message: 'inventory apply', requestType: event.RequestType, plan }));
  if (result.plan.refusals.length > 0) throw new Error(`inventory not applied: ${plan.join('; ')}`);
  return { PhysicalResourceId: PHYSICAL_ID, Data: { Changes: String(result.done.length) } };
}

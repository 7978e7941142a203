/**
 * `cdk deploy -c inventory=FILE`: the inventory, validated at synth with the AWS rules (no local
 * volume or compute driver, local share backends' roots on the share storage), becomes a custom resource whose
 * provider runs the `deploy` function of the wiring table (functions/inventory/deploy.ts). It is
 * applied after every table, bucket and function exists, so a fresh deploy is usable at once, and
 * again on every deploy whose document changed.
 */
import { CustomResource, RemovalPolicy, Validations, type App, type Stack } from 'aws-cdk-lib';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import { LogGroup, type RetentionDays } from 'aws-cdk-lib/aws-logs';
import { Provider } from 'aws-cdk-lib/custom-resources';
import { INVENTORY_PROPERTY } from '../../functions/inventory/deploy.js';
import { hasShareRoot } from '../../functions/inventory/records.js';
import { parseInventory, type Inventory } from '../../functions/inventory/schema.js';
import { readInventoryFile } from '../inventory-file.js';
import { logicalIdOf } from './acknowledgements.js';
import { shareBackendsFromContext } from './copy-worker.js';

/** Reads and validates an inventory file for a deployment; a problem fails synth with its path in the document. */
export function inventoryForDeploy(file: string): Inventory {
  return parseInventory(readInventoryFile(file), 'aws');
}

export function addInventoryResource(stack: Stack, onEvent: IFunction, inventory: Inventory, logRetention: RetentionDays): CustomResource {
  const provider = new Provider(stack, 'InventoryProvider', {
    onEventHandler: onEvent,
    logGroup: new LogGroup(stack, 'InventoryProviderLogs', { retention: logRetention, removalPolicy: RemovalPolicy.DESTROY }),
  });
  Validations.of(provider).acknowledge(
    { id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]', reason: 'The CDK Provider framework function only writes its own logs.' },
    { id: `AwsSolutions-IAM5[Resource::<${logicalIdOf(onEvent)}.Arn>:*]`, reason: 'The Provider framework invokes the inventory-apply function and its versions (grantInvoke writes `:*`).' },
    { id: 'AwsSolutions-L1', reason: 'The Provider framework chooses its own runtime; CDK keeps it on a supported one.' },
  );
  return new CustomResource(stack, 'Inventory', {
    serviceToken: provider.serviceToken,
    resourceType: 'Custom::FerryInventory',
    properties: { [INVENTORY_PROPERTY]: JSON.stringify(inventory) },
  });
}

/**
 * With an inventory, the share storage (VPC, EFS, the copy worker and its interface endpoints, about
 * $58 a month idle) exists only when it names share backends of a local kind, whose shares are
 * directories on that storage; an aws-efs backend makes a file system of its own per share and needs
 * none of it (its functions then run outside any VPC and reach the EFS and EC2 APIs directly).
 * Context `shareBackends=false` with an inventory that names local share backends is a
 * contradiction, refused at synth.
 */
export function shareBackendsFor(app: App, inventory: Inventory): boolean {
  const onStorage = inventory.shareBackends.filter(hasShareRoot);
  const wanted = onStorage.length > 0;
  if (app.node.tryGetContext('shareBackends') !== undefined && shareBackendsFromContext(app) !== wanted) {
    throw new Error(`context shareBackends=${String(!wanted)} contradicts the inventory, which names ${onStorage.length} share backend(s) on the share storage: leave shareBackends out`);
  }
  return wanted;
}
